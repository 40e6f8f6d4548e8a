#!/usr/bin/env python3
"""PyTorch eager baseline for `atoll bench train`: the same model, batch shape and AdamW step.

    torch_reference.py --layers 4 --dim 256 --heads 4 --ffn 768 --seq 256 --batch 8 \
        --vocab 256 --threads 2 --steps 10 --json

The model is the reference Llama of tests/tools/torch_llama.py (imported, not copied). One step
is what algorithms::InnerTrainer::step does: zero_grad, forward, mean cross-entropy, backward,
clip_grad_norm_ to 1.0, AdamW step (decay on matrices only). Two warm-up steps, then `--steps`
timed steps; step_ms is the median step. Tokens are uniform random: the speed of a step does not
depend on the text.

Prints the same keys as `atoll bench train --json`; gflops counts 6·params + 12·L·C·T FLOPs per
token (algorithms::flops_per_token).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tools"))
import torch_llama  # noqa: E402


def make_params(cfg, gen):
    """Hugging Face Llama names -> fp32 leaf tensors, initialized like algorithms::init_params."""
    V, C, F, L = cfg.vocab, cfg.dim, cfg.ffn, cfg.layers
    resid = 1.0 / math.sqrt(2.0 * L)
    shapes = [("model.embed_tokens.weight", (V, C), 0.02)]
    for l in range(L):
        pre = f"model.layers.{l}."
        shapes += [
            (pre + "input_layernorm.weight", (C,), None),
            (pre + "self_attn.q_proj.weight", (C, C), 0.02),
            (pre + "self_attn.k_proj.weight", (C, C), 0.02),
            (pre + "self_attn.v_proj.weight", (C, C), 0.02),
            (pre + "self_attn.o_proj.weight", (C, C), 0.02 * resid),
            (pre + "post_attention_layernorm.weight", (C,), None),
            (pre + "mlp.gate_proj.weight", (F, C), 0.02),
            (pre + "mlp.up_proj.weight", (F, C), 0.02),
            (pre + "mlp.down_proj.weight", (C, F), 0.02 * resid),
        ]
    shapes.append(("model.norm.weight", (C,), None))
    p = {}
    for name, shape, sd in shapes:
        t = torch.ones(shape) if sd is None else torch.randn(shape, generator=gen) * sd
        p[name] = t.requires_grad_(True)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    a = ap.parse_args()
    if a.dim % a.heads or (a.dim // a.heads) % 2:
        sys.exit("torch_reference.py: --dim must be a multiple of --heads with an even head dim")
    if min(a.layers, a.dim, a.heads, a.ffn, a.seq, a.batch, a.vocab, a.steps) <= 0:
        sys.exit("torch_reference.py: sizes and --steps must be positive")

    threads = a.threads if a.threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)

    cfg = torch_llama.Config(
        {
            "vocab": a.vocab,
            "dim": a.dim,
            "layers": a.layers,
            "heads": a.heads,
            "ffn_hidden": a.ffn,
            "rope_base": 10000.0,
            "norm_eps": 1e-5,
        }
    )
    gen = torch.Generator().manual_seed(a.seed)
    p = make_params(cfg, gen)
    names = list(p)
    nparams = sum(t.numel() for t in p.values())
    rows = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
    inputs, targets = rows[:, :-1], rows[:, 1:]

    opt = torch.optim.AdamW(
        [
            {"params": [p[n] for n in names if p[n].dim() >= 2], "weight_decay": 0.1},
            {"params": [p[n] for n in names if p[n].dim() < 2], "weight_decay": 0.0},
        ],
        lr=3e-3,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    params = [p[n] for n in names]

    def step():
        opt.zero_grad(set_to_none=True)
        logits, router_loss = torch_llama.forward(p, cfg, inputs)  # router_loss: 0 when dense
        loss = torch_llama.loss_fn(logits, targets)
        (loss + router_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for _ in range(2):
        step()
    # Every step is timed; step_ms is the median, step_ms_mean the mean (as atoll bench train).
    ms = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    step_ms = statistics.median(ms)
    mean_ms = statistics.fmean(ms)
    tps = a.batch * a.seq / (step_ms / 1e3)
    flops_per_token = 6.0 * nparams + 12.0 * a.layers * a.dim * a.seq
    gflops = flops_per_token * tps / 1e9
    if a.json:
        print(
            json.dumps(
                {
                    "bench": "train_torch",
                    "params": nparams,
                    "layers": a.layers,
                    "dim": a.dim,
                    "heads": a.heads,
                    "ffn": a.ffn,
                    "seq": a.seq,
                    "batch": a.batch,
                    "vocab": a.vocab,
                    "threads": torch.get_num_threads(),
                    "steps": a.steps,
                    "step_ms": round(step_ms, 3),
                    "step_ms_mean": round(mean_ms, 3),
                    "tokens_per_s": round(tps, 1),
                    "gflops": round(gflops, 2),
                    "torch_version": torch.__version__,
                },
                separators=(",", ":"),
            )
        )
    else:
        print(
            f"params {nparams} | step {step_ms:.1f} ms | {tps:.0f} tokens/s | "
            f"{gflops:.2f} GFLOP/s (torch {torch.__version__}, {torch.get_num_threads()} threads)"
        )


if __name__ == "__main__":
    main()
