#!/usr/bin/env python3
"""Paired bpb gaps of the demo's codec pairs (bench/demo_codecs/run.sh).

Usage: report.py RUNS_DIR OUT_JSON. Reads every RUNS_DIR/*.json summary written by
`atoll simulate --summary-json`; for each (codec, pull_codec) pair other than none/exact, the gap
of a seed is 100 * (bpb_pair - bpb_ref) / bpb_ref with bpb_ref the none/exact run of that seed.
Writes the rows (and every run) to OUT_JSON and prints a Markdown table.
"""
import datetime
import glob
import json
import math
import os
import sys


def main():
    runs_dir, out = sys.argv[1], sys.argv[2]
    runs = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
        with open(path) as f:
            s = json.load(f)
        seed = int(os.path.basename(path)[:-5].rsplit("_", 1)[1])
        runs.append({"codec_up": s["codec"], "codec_down": s["pull_codec"], "seed": seed,
                     "final_val_bpb": s["final_val_bpb"], "bytes_up": s["bytes_up"],
                     "bytes_down": s["bytes_down"], "bytes_sent": s["bytes_sent"],
                     "ddp_bytes": s["ddp_bytes_equivalent"], "wall_s": s["wall_s"]})
    ref = {r["seed"]: r for r in runs if (r["codec_up"], r["codec_down"]) == ("none", "exact")}
    pairs = sorted({(r["codec_up"], r["codec_down"]) for r in runs})
    rows = []
    for up, down in pairs:
        mine = [r for r in runs if (r["codec_up"], r["codec_down"]) == (up, down) and
                r["seed"] in ref]
        if not mine:
            continue
        gaps = [100.0 * (r["final_val_bpb"] - ref[r["seed"]]["final_val_bpb"]) /
                ref[r["seed"]]["final_val_bpb"] for r in mine]
        n = len(gaps)
        mean = sum(gaps) / n
        se = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (n - 1) / n) if n > 1 else 0.0
        sent = sum(r["bytes_sent"] for r in mine) / n
        ddp = sum(r["ddp_bytes"] for r in mine) / n
        rows.append({"codec_up": up, "codec_down": down, "seeds": n,
                     "mean_final_val_bpb": sum(r["final_val_bpb"] for r in mine) / n,
                     "bpb_gap_percent": mean, "bpb_gap_se": se,
                     "bytes_up": sum(r["bytes_up"] for r in mine) / n,
                     "bytes_down": sum(r["bytes_down"] for r in mine) / n,
                     "bytes_sent": sent, "ddp_bytes": ddp, "bytes_vs_ddp": ddp / sent})
    doc = {"bench": "demo_codecs", "date": datetime.date.today().isoformat(),
           "machine": "2-core CPU",
           "settings": "atoll simulate, demo defaults: 4 sites, 8 rounds x 25 inner steps, "
                       "dim 128, 4 layers, seq 128, batch 8, Brown by genre",
           "reference": "codec none, pull_codec exact (same seed)", "rows": rows, "runs": runs}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("| up | down | seeds | mean bpb | gap % (mean ± s.e.) | bytes sent | vs data-parallel |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['codec_up']} | {r['codec_down']} | {r['seeds']} | "
              f"{r['mean_final_val_bpb']:.4f} | {r['bpb_gap_percent']:+.2f} ± "
              f"{r['bpb_gap_se']:.2f} | {r['bytes_sent'] / 1e6:.1f} MB | "
              f"{r['bytes_vs_ddp']:.1f}x |")


if __name__ == "__main__":
    main()
