#!/usr/bin/env python3
"""How often stale-update detection drops honest updates, and how often it drops stale ones.

Runs `atoll simulate` over two regimes and writes bench/results/stale-rates.json:
  - tiny: the integration tests' model (dim 32, 2 layers, 28.8k parameters), 5 inner steps of
    4 x 32 tokens a round (640 tokens: updates mostly gradient noise), int8 pushes with error
    feedback, 24 rounds; 3, 4 and 8 sites, genre and iid splits;
  - demo: the demo model (dim 128, 4 layers, 0.9M parameters), 10 inner steps of 8 x 128 tokens,
    codecs none / exact (as bench/robust), 12 rounds; 4 and 8 sites.
Each regime runs honest and with the `stale` attack (the last K sites send their honest update
one round late: 4 sites with 1, 8 with 2). Rows: regime, sites, byzantine, split, seed,
honest_updates, honest_updates_dropped, stale_updates (the Byzantine sites' pushes after round
0), stale_updates_dropped, final_val_bpb, final_fingerprint, wall_s.

usage: bench/robust/stale_rates.py [--quick] [--out FILE]   (ATOLL=build/atoll)
  --quick: the tiny regime only (about a minute); the full grid takes about 15 minutes on 2 cores.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATOLL = os.environ.get("ATOLL", os.path.join(ROOT, "build", "atoll"))

TINY = ["--dim", "32", "--layers", "2", "--heads", "2", "--ffn", "64", "--seq", "32", "--batch",
        "4", "--lr", "1e-2", "--codec", "int8", "--pull-codec", "exact", "--eval-tokens", "2048",
        "--inner-steps", "5", "--rounds", "24"]
DEMO = ["--codec", "none", "--pull-codec", "exact", "--eval-tokens", "4096", "--inner-steps", "10",
        "--rounds", "12"]


def cells(quick):
    for seed in (42, 7, 3, 4):
        for split in ("genre", "iid"):
            for sites in (3, 4, 8):
                yield "tiny", sites, 0, split, seed
        for sites, byz in ((4, 1), (8, 2)):
            yield "tiny", sites, byz, "genre", seed
    if quick:
        return
    for seed in (1234, 7):
        for sites, byz in ((4, 0), (4, 1), (8, 0), (8, 2)):
            yield "demo", sites, byz, "iid", seed
        yield "demo", 8, 0, "genre", seed


def run(regime, sites, byz, split, seed):
    with tempfile.TemporaryDirectory(prefix="atoll-stale-") as tmp:
        summary = os.path.join(tmp, "summary.json")
        argv = [ATOLL, "simulate", "--nodes", str(sites), "--seed", str(seed), "--split", split,
                "--http", "off", "--exit-when-done", "--summary-json", summary]
        argv += TINY if regime == "tiny" else DEMO
        if byz:
            argv += ["--byzantine", str(byz), "--attack", "stale"]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"stale_rates: {' '.join(argv)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        s = json.load(open(summary))
    byzantine_pushes = byz * (s["rounds"] - 1)  # round 0 sends its own update
    return {
        "regime": regime, "sites": sites, "byzantine": byz, "split": split, "seed": seed,
        "rounds": s["rounds"], "inner_steps": s["inner_steps"],
        "honest_updates": s["honest_updates"],
        "honest_updates_dropped": s["honest_updates_dropped"],
        "stale_updates": byzantine_pushes,
        "stale_updates_dropped": s["updates_dropped"] - s["honest_updates_dropped"],
        "stale_margin": s["stale_margin"],
        "final_val_bpb": s["final_val_bpb"], "final_fingerprint": s["final_fingerprint"],
        "wall_s": round(time.monotonic() - started, 2),
    }


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "stale-rates.json"))
    a = ap.parse_args()
    if not os.access(ATOLL, os.X_OK):
        sys.exit(f"stale_rates: no atoll binary at {ATOLL}: run `make build` first or set ATOLL")
    rows = []
    for cell in cells(a.quick):
        rows.append(run(*cell))
        r = rows[-1]
        print(f"{r['regime']:5} {r['sites']} sites ({r['byzantine']} stale) {r['split']:5} seed "
              f"{r['seed']:4}: honest dropped {r['honest_updates_dropped']}/{r['honest_updates']}, "
              f"stale dropped {r['stale_updates_dropped']}/{r['stale_updates']}", flush=True)
    summary = []
    for regime in ("tiny", "demo"):
        for attacked in (False, True):
            sel = [r for r in rows if r["regime"] == regime and (r["byzantine"] > 0) == attacked]
            if not sel:
                continue
            hu = sum(r["honest_updates"] for r in sel)
            hd = sum(r["honest_updates_dropped"] for r in sel)
            su = sum(r["stale_updates"] for r in sel)
            sd = sum(r["stale_updates_dropped"] for r in sel)
            summary.append({"regime": regime, "attack": "stale" if attacked else "none",
                            "runs": len(sel), "honest_updates": hu, "honest_updates_dropped": hd,
                            "stale_updates": su, "stale_updates_dropped": sd})
    doc = {"date": datetime.date.today().isoformat(), "machine": cpu_model(),
           "cores": os.cpu_count(), "rows": rows, "summary": summary}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    for s in summary:
        print(f"{s['regime']:5} attack {s['attack']:5} ({s['runs']} runs): honest dropped "
              f"{s['honest_updates_dropped']}/{s['honest_updates']}, stale dropped "
              f"{s['stale_updates_dropped']}/{s['stale_updates']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
