#!/usr/bin/env python3
"""Reference Llama in plain PyTorch for tests/algorithms/torch_reference_test.cc and
tests/node/hf_model_test.cc.

    torch_llama.py INPUT.safetensors OUTPUT.safetensors          (Atoll layout, see below)
    torch_llama.py hf MODEL_DIR INPUT.safetensors OUTPUT.safetensors

The `hf` mode is an independent implementation of Hugging Face transformers' LlamaForCausalLM /
Qwen2ForCausalLM / MistralForCausalLM forward (eager attention, float32), fed with a Hugging Face
model directory: config.json and model.safetensors or model.safetensors.index.json + shards
(F32, BF16 or F16, upcast to float32). RoPE is rotate_half with HF's float32 inv_freq and
cos/sin, KV heads repeated with repeat_kv, q/k/v biases for Qwen2, lm_head.weight unless
tie_word_embeddings. INPUT holds batch.inputs (B, T) I32 and gen.prompt (P,) I32 with metadata
gen_tokens; OUTPUT holds logits (B, T, V) F32 and gen.tokens (gen_tokens,) I32, the greedy
continuation of the prompt (argmax, the lowest id on ties, full recompute per token).

INPUT (written by the C++ test) holds
  - every parameter under its Hugging Face Llama name (F32), output head tied to
    model.embed_tokens.weight;
  - batch.inputs (B, T) I32, batch.targets (B, T) I32 (-1 = ignored): the forward/backward batch;
  - train.rows (B, T + 1) I32: the batch for the AdamW steps (inputs = first T, targets = last T);
  - __metadata__: vocab, dim, layers, heads, ffn_hidden, rope_base, norm_eps, lr, beta1, beta2,
    eps, weight_decay, grad_clip, steps (decimal strings); optionally kv_heads (grouped-query
    attention), attention_bias ("1": q/k/v biases model.layers.{l}.self_attn.{q,k,v}_proj.bias)
    and tie_word_embeddings ("0": the head is lm_head.weight); for a model with MoE layers also
    moe_experts, moe_top_k, moe_hidden, moe_every, moe_score, moe_shared_hidden, moe_aux_coef,
    moe_z_coef (docs/moe.md); for LoRA adapters lora_rank and lora_alpha, with the adapters
    stored as <projection>.lora_A.weight (r, in) and <projection>.lora_B.weight (out, r) beside
    the projection's weight (PEFT semantics: y = W x + (lora_alpha / lora_rank) * B (A x)).
    With adapters only they are trained: gradients, AdamW and final.* cover the adapters alone.
OUTPUT holds
  - logits (B, T, V) F32, loss () F32 (the cross-entropy), aux () F32 (the weighted MoE router
    losses, 0 for a dense model), grad.<name> F32 for every parameter of loss + aux (float32 run);
  - loss_f64 () F64 and grad_f64.<name> F64 (the same in float64, to show how far float32 is
    from exact);
  - train.losses (steps,) F32 and train.grad_norms (steps,) F64: loss and pre-clip gradient norm
    before each AdamW step; final.<name> F32: parameters after the last step.

The model matches algorithms/model/llama.h: RMSNorm (x * rsqrt(mean(x^2) + eps) * w), RoPE on
ADJACENT pairs (x[2i], x[2i+1]) rotated by pos * base^(-2i/D) (not Hugging Face's rotate_half
layout), causal softmax attention with scale 1/sqrt(D), SwiGLU, no biases, pre-norm blocks,
final norm, tied head, mean cross-entropy over non-ignored targets. An MoE layer (every
moe_every-th) replaces the SwiGLU FFN by a router (softmax or sigmoid scores), top-k experts per
token (lower id on ties), weights renormalized over the k, SwiGLU experts run per expert on the
tokens routed to it (a plain loop, not the permuted grouped path of the C++ side), an optional
always-on shared expert, and the load-balancing loss E * sum_e f_e * P_e and z-loss
mean(logsumexp^2), weighted by their coefficients and summed over MoE layers. AdamW is torch.optim.AdamW
with weight decay only on parameters with >= 2 dimensions, and gradient clipping with
torch.nn.utils.clip_grad_norm_.

No `safetensors` package is needed: the format is parsed and written with struct + json.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {  # safetensors dtype -> (torch dtype, bytes)
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
    "U8": (torch.uint8, 1),
    "BF16": (torch.bfloat16, 2),
    "F16": (torch.float16, 2),
}
TORCH_TO_ST = {v[0]: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = buf[8 + n :]
    tensors = {}
    for name, e in header.items():
        dtype, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        shape = e["shape"]
        raw = bytearray(data[b:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape).clone()
    return tensors, meta


def write_safetensors(path, tensors, meta=None):
    header = {}
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {
            "dtype": TORCH_TO_ST[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


class Config:
    def __init__(self, meta):
        self.vocab = int(meta["vocab"])
        self.dim = int(meta["dim"])
        self.layers = int(meta["layers"])
        self.heads = int(meta["heads"])
        self.ffn = int(meta["ffn_hidden"])
        self.rope_base = float(meta["rope_base"])
        self.eps = float(meta["norm_eps"])
        self.kv_heads = int(meta.get("kv_heads", self.heads))
        self.bias = meta.get("attention_bias", "0") == "1"
        self.tied = meta.get("tie_word_embeddings", "1") == "1"
        self.lora_scale = (float(meta["lora_alpha"]) / int(meta["lora_rank"])
                           if "lora_rank" in meta else 0.0)
        self.experts = int(meta.get("moe_experts", "0"))
        if self.experts:
            self.top_k = int(meta["moe_top_k"])
            self.every = int(meta["moe_every"])
            self.score = meta["moe_score"]
            self.shared = int(meta["moe_shared_hidden"])
            self.aux_coef = float(meta["moe_aux_coef"])
            self.z_coef = float(meta["moe_z_coef"])

    def is_moe(self, l):
        return self.experts > 0 and (l + 1) % self.every == 0


def swiglu_ffn(x, gate, up, down):
    return (F.silu(x @ gate.t()) * (x @ up.t())) @ down.t()


def moe_ffn(h, p, pre, cfg):
    """h (B, T, C) -> (out (B, T, C), L_aux, L_z) of one MoE layer."""
    B, T, C = h.shape
    E, K = cfg.experts, cfg.top_k
    x = h.reshape(-1, C)
    N = x.shape[0]
    logits = x @ p[pre + "mlp.gate.weight"].t()  # (N, E)
    s = logits.softmax(-1) if cfg.score == "softmax" else torch.sigmoid(logits)
    # Top-k, the lower expert id first on equal scores (a stable descending sort).
    _, order = torch.sort(s, dim=-1, descending=True, stable=True)
    idx = order[:, :K]  # (N, K)
    w = s.gather(1, idx)
    w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        ex = f"{pre}mlp.experts.{e}."
        y = swiglu_ffn(x[tok], p[ex + "gate_proj.weight"], p[ex + "up_proj.weight"],
                       p[ex + "down_proj.weight"])
        out = out.index_add(0, tok, y * w[tok, slot].unsqueeze(-1))
    if cfg.shared:
        sh = pre + "mlp.shared_expert."
        out = out + swiglu_ffn(x, p[sh + "gate_proj.weight"], p[sh + "up_proj.weight"],
                               p[sh + "down_proj.weight"])
    f = F.one_hot(idx, E).sum((0, 1)).to(x.dtype) / (N * K)  # fraction of assignments (no grad)
    probs = s if cfg.score == "softmax" else s / s.sum(-1, keepdim=True)
    aux = E * (f * probs.mean(0)).sum()
    z = torch.logsumexp(logits, -1).pow(2).mean()
    return out.view(B, T, C), aux, z


def linear(x, p, module, cfg):
    """x @ W.t() for p[module + ".weight"], plus the LoRA update when the module has adapters."""
    y = x @ p[module + ".weight"].t()
    a = p.get(module + ".lora_A.weight")
    if a is not None:
        y = y + cfg.lora_scale * ((x @ a.t()) @ p[module + ".lora_B.weight"].t())
    return y


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, base):
    """x (B, T, H, D): rotate adjacent pairs (x[..., 2i], x[..., 2i+1]) by t * base^(-2i/D)."""
    B, T, H, D = x.shape
    i = torch.arange(D // 2, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / D)  # (D/2)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    cos = torch.cos(ang).to(x.dtype)[None, :, None, :]
    sin = torch.sin(ang).to(x.dtype)[None, :, None, :]
    xp = x.reshape(B, T, H, D // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(B, T, H, D)


def forward(p, cfg, inputs):
    """inputs (B, T) int64 -> (logits (B, T, V), weighted MoE router losses)."""
    B, T = inputs.shape
    C, H = cfg.dim, cfg.heads
    D = C // H
    wte = p["model.embed_tokens.weight"]
    x = wte[inputs]  # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    aux_total = torch.zeros((), dtype=x.dtype)
    for l in range(cfg.layers):
        pre = f"model.layers.{l}."
        h = rmsnorm(x, p[pre + "input_layernorm.weight"], cfg.eps)
        KV = cfg.kv_heads
        q = linear(h, p, pre + "self_attn.q_proj", cfg)
        k = linear(h, p, pre + "self_attn.k_proj", cfg)
        v = linear(h, p, pre + "self_attn.v_proj", cfg)
        if cfg.bias:
            q = q + p[pre + "self_attn.q_proj.bias"]
            k = k + p[pre + "self_attn.k_proj.bias"]
            v = v + p[pre + "self_attn.v_proj.bias"]
        q, k, v = q.view(B, T, H, D), k.view(B, T, KV, D), v.view(B, T, KV, D)
        q, k = rope(q, cfg.rope_base), rope(k, cfg.rope_base)
        # Grouped-query attention: query head h reads KV head h // (H // KV).
        k, v = (t.repeat_interleave(H // KV, dim=2) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p, pre + "self_attn.o_proj", cfg)
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        if cfg.is_moe(l):
            y, aux, z = moe_ffn(h, p, pre, cfg)
            x = x + y
            aux_total = aux_total + cfg.aux_coef * aux + cfg.z_coef * z
        else:
            gate = F.silu(linear(h, p, pre + "mlp.gate_proj", cfg))
            x = x + linear(gate * linear(h, p, pre + "mlp.up_proj", cfg), p,
                           pre + "mlp.down_proj", cfg)
    x = rmsnorm(x, p["model.norm.weight"], cfg.eps)
    head = wte if cfg.tied else p["lm_head.weight"]
    return x @ head.t(), aux_total


def loss_fn(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)


# ---- Hugging Face semantics (the `hf` mode), written after transformers' modeling_llama.py and
# modeling_qwen2.py (eager attention path).


def hf_load(model_dir):
    with open(f"{model_dir}/config.json") as f:
        config = json.load(f)
    try:
        with open(f"{model_dir}/model.safetensors.index.json") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        tensors, _ = read_safetensors(f"{model_dir}/{name}")
        weights.update({k: v.to(torch.float32) for k, v in tensors.items()})
    return config, weights


def hf_rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_repeat_kv(x, n_rep):
    """(B, KV, T, D) -> (B, KV * n_rep, T, D), as transformers' repeat_kv."""
    b, kv, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)


def hf_rmsnorm(x, w, eps):
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def hf_forward(config, w, input_ids):
    """input_ids (B, T) int64 -> logits (B, T, V), float32."""
    B, T = input_ids.shape
    H = config["num_attention_heads"]
    KV = config.get("num_key_value_heads") or H
    C = config["hidden_size"]
    D = C // H
    eps = config.get("rms_norm_eps", 1e-6)
    base = config.get("rope_theta", 10000.0)
    qwen2 = config["architectures"][0] == "Qwen2ForCausalLM"
    # LlamaRotaryEmbedding: float32 inv_freq, positions and angles.
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]  # (1, 1, T, D)
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][input_ids]
    for l in range(config["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = hf_rmsnorm(x, w[pre + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ w[pre + f"self_attn.{name}.weight"].t()
            if qwen2 and name != "o_proj":
                y = y + w[pre + f"self_attn.{name}.bias"]
            return y

        q = proj("q_proj").view(B, T, H, D).transpose(1, 2)
        k = proj("k_proj").view(B, T, KV, D).transpose(1, 2)
        v = proj("v_proj").view(B, T, KV, D).transpose(1, 2)
        q = q * cos + hf_rotate_half(q) * sin
        k = k * cos + hf_rotate_half(k) * sin
        k, v = hf_repeat_kv(k, H // KV), hf_repeat_kv(v, H // KV)
        att = (q @ k.transpose(2, 3)) / math.sqrt(D) + mask
        att = att.softmax(dim=-1, dtype=torch.float32)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[pre + "self_attn.o_proj.weight"].t()
        h = hf_rmsnorm(x, w[pre + "post_attention_layernorm.weight"], eps)
        x = x + swiglu_ffn(h, w[pre + "mlp.gate_proj.weight"], w[pre + "mlp.up_proj.weight"],
                           w[pre + "mlp.down_proj.weight"])
    x = hf_rmsnorm(x, w["model.norm.weight"], eps)
    tied = config.get("tie_word_embeddings", False)
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.t()


def hf_main(model_dir, in_path, out_path):
    config, w = hf_load(model_dir)
    tensors, meta = read_safetensors(in_path)
    out = {}
    with torch.no_grad():
        out["logits"] = hf_forward(config, w, tensors["batch.inputs"].long())
        ctx = tensors["gen.prompt"].long().tolist()
        new = []
        for _ in range(int(meta["gen_tokens"])):
            logits = hf_forward(config, w, torch.tensor([ctx]))[0, -1]
            nxt = int(torch.argmax(logits))  # the first (lowest) id among equal maxima
            ctx.append(nxt)
            new.append(nxt)
        out["gen.tokens"] = torch.tensor(new, dtype=torch.int32)
    write_safetensors(out_path, out, {"torch_version": torch.__version__})


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "hf":
        hf_main(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) != 3:
        sys.exit("usage: torch_llama.py INPUT.safetensors OUTPUT.safetensors")
    torch.manual_seed(0)
    tensors, meta = read_safetensors(sys.argv[1])
    cfg = Config(meta)
    names = [n for n in tensors if n.startswith("model.") or n == "lm_head.weight"]
    # With LoRA adapters only they train; the base is frozen.
    adapters = [n for n in names if ".lora_" in n]
    trainable = adapters if adapters else names
    inputs = tensors["batch.inputs"].long()
    targets = tensors["batch.targets"].long()
    out = {}

    # float32 (compared against the C++ float32 engine) and float64 (how far float32 is from exact).
    for dtype, tag in ((torch.float32, ""), (torch.float64, "_f64")):
        p = {n: tensors[n].to(dtype).clone().requires_grad_(n in trainable) for n in names}
        logits, aux = forward(p, cfg, inputs)
        loss = loss_fn(logits, targets)
        (loss + aux).backward()
        if tag == "":
            out["logits"] = logits.detach()
        out["loss" + tag] = loss.detach().reshape(())
        out["aux" + tag] = aux.detach().reshape(())
        for n in trainable:
            out[("grad" if tag == "" else "grad_f64") + "." + n] = p[n].grad.detach()

    # AdamW steps on train.rows, float32.
    rows = tensors["train.rows"].long()
    tin, ttg = rows[:, :-1], rows[:, 1:]
    p = {n: tensors[n].clone().requires_grad_(n in trainable) for n in names}
    decay = [p[n] for n in trainable if p[n].dim() >= 2]
    no_decay = [p[n] for n in trainable if p[n].dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(meta["weight_decay"])},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=float(meta["lr"]),
        betas=(float(meta["beta1"]), float(meta["beta2"])),
        eps=float(meta["eps"]),
    )
    clip = float(meta["grad_clip"])
    losses, norms = [], []
    for _ in range(int(meta["steps"])):
        opt.zero_grad(set_to_none=True)
        logits, aux = forward(p, cfg, tin)
        loss = loss_fn(logits, ttg)
        (loss + aux).backward()
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_([p[n] for n in trainable], clip)
        else:
            norm = torch.sqrt(sum((p[n].grad.double() ** 2).sum() for n in trainable))
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for n in trainable:
        out["final." + n] = p[n].detach()

    write_safetensors(sys.argv[2], out, {"torch_version": torch.__version__})


if __name__ == "__main__":
    main()
