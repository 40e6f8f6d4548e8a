#!/usr/bin/env python3
"""Outer-step tuning for the bandwidth grid on a seed the grid does not report (issue 16).

Runs `bench/bandwidth/run.py` for uncompressed DiLoCo (none/exact) at one (M, H) and one tuning
seed for each outer (lr, momentum) setting, and writes the final bpb of each with its gap to
data-parallel at equal tokens (the same seed) to bench/results/bandwidth-outer-tuning.json.
The setting with the lowest bpb is the one the grid's seeds are then run with (the plan and its
reason: docs/decisions.md, "Outer step for few rounds").

Usage: bench/bandwidth/tune_outer.py [--runs DIR] [--seed 99] [--m 4] [--h 250]
         [--settings 1.0/0.9,1.0/0,...]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SETTINGS = "1.0/0.9,1.0/0,1.0/0.5,1.0/0.7,1.5/0,1.5/0.5,2.0/0,0.7/0.9"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default=None)
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--m", type=int, default=4)
    p.add_argument("--h", type=int, default=250)
    p.add_argument("--total", type=int, default=2000)
    p.add_argument("--settings", default=DEFAULT_SETTINGS, help="lr/momentum,...")
    p.add_argument("--out", default="bench/results/bandwidth-outer-tuning.json")
    a = p.parse_args()
    a.runs = a.runs or tempfile.mkdtemp(prefix="bandwidth-tune-")
    rows = []
    for setting in a.settings.split(","):
        lr, _, momentum = setting.partition("/")
        out = os.path.join(a.runs, f"tune_{lr}_{momentum}.json")
        rc = subprocess.call([sys.executable, os.path.join(HERE, "run.py"), "--runs", a.runs,
                              "--seeds", str(a.seed), "--nodes", str(a.m), "--h", str(a.h),
                              "--pairs", "none/exact", "--total", str(a.total), "--outer-lr", lr,
                              "--outer-momentum", momentum, "--out", out, "--no-results-md"],
                             stdout=subprocess.DEVNULL)
        if rc != 0:
            sys.exit(f"outer tuning: run.py failed for lr {lr}, momentum {momentum} (exit {rc})")
        with open(out) as f:
            row = json.load(f)["rows"][0]
        rows.append({"outer_lr": float(lr), "outer_momentum": float(momentum), "M": a.m, "H": a.h,
                     "seed": a.seed, "final_val_bpb": row["final_val_bpb"],
                     "ddp_val_bpb": row["ddp_val_bpb"], "bpb_gap_percent": row["bpb_gap_percent"]})
        print(f"lr {lr} momentum {momentum}: bpb {row['final_val_bpb']:.4f}, "
              f"{row['bpb_gap_percent']:+.2f}% vs data-parallel", flush=True)
    best = min(rows, key=lambda r: r["final_val_bpb"])
    # One file for every (M, H) tuned: rows of other cells already in --out are kept.
    kept, chosen = [], {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            old = json.load(f)
        kept = [r for r in old["rows"] if (r["M"], r["H"]) != (a.m, a.h)]
        chosen = {k: v for k, v in old.get("best", {}).items() if k != f"M{a.m}_H{a.h}"}
    chosen[f"M{a.m}_H{a.h}"] = {"outer_lr": best["outer_lr"],
                                "outer_momentum": best["outer_momentum"]}
    doc = {"bench": "bandwidth-outer-tuning", "date": datetime.date.today().isoformat(),
           "machine": f"{os.cpu_count()}-core {platform.machine()} CPU",
           "setting": {"codec_up": "none", "codec_down": "exact", "inner_steps_per_site": a.total},
           "best": chosen, "rows": kept + rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"best: lr {best['outer_lr']:g}, momentum {best['outer_momentum']:g}")


if __name__ == "__main__":
    main()
