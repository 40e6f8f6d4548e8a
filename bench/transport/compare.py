#!/usr/bin/env python3
"""bench/transport/compare.py: gRPC streams against the bulk lane, interleaved (issue 16, item 4).

This host's speed moves between runs (one core's AES-256-GCM reads 2700 or 4400 MB/s from one
minute to the next), so the two transports are compared in rounds: each round runs, back to
back, the bare gRPC stream (`run.py --floor`), the bulk lane alone (`run.py --floor-lane`), and
`atoll coordinator` + `atoll node` over gRPC streams and over the bulk lane (`run.py --lane
grpc|bulk`), every one against its own AES-256-GCM figure. Reported per round and as the median
over rounds: the median of the later streams (the first stream of a run writes into fresh
buffers) and all streams, in MB/s and as a share of that run's AES-256-GCM.

Usage: bench/transport/compare.py [--repeats N (4)] [--rounds N (8)] [--out FILE]
                                  [--no-results-md] [--report EARLIER.json]
Environment: ATOLL (binary, default build/atoll).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from report_util import replace_section  # noqa: E402

MODES = [("grpc floor", ["--floor"]), ("lane floor", ["--floor-lane"]),
         ("grpc", ["--lane", "grpc"]), ("lane", ["--lane", "bulk"])]


def one(mode_args, rounds, out):
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "transport", "run.py"),
                    "--rounds", str(rounds), "--no-results-md", "--out", out] + mode_args,
                   check=True, capture_output=True, text=True, timeout=1800)
    with open(out) as f:
        doc = json.load(f)
    r = doc["result"]
    row = {"aes_gcm_mbps": round(doc["aes_gcm_mbps"], 1), "date": doc["date"]}
    for d in ("pull", "push"):
        row[d + "_later_mbps"] = round(r[d + "_later_mbps"], 1)
        row[d + "_all_mbps"] = round(r[d + "_mbps"], 1)
        row[d + "_later_vs_aes"] = round(r[d + "_later_vs_aes"], 4)
        row[d + "_all_vs_aes"] = round(r[d + "_vs_aes"], 4)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "transport-compare.json"))
    ap.add_argument("--no-results-md", action="store_true")
    ap.add_argument("--report", metavar="JSON",
                    help="no runs: write --out and the table from the runs in JSON (a --out of "
                         "an earlier run)")
    a = ap.parse_args()
    runs = []
    if a.report:
        with open(a.report) as f:
            earlier = json.load(f)
        runs, a.repeats, a.rounds = earlier["runs"], earlier["repeats"], earlier["rounds"]
    else:
        with tempfile.TemporaryDirectory(prefix="atoll-compare-") as work:
            for rep in range(a.repeats):
                for name, args in MODES:
                    row = one(args, a.rounds, os.path.join(work, "run.json"))
                    row.update({"repeat": rep + 1, "mode": name})
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    summary = {}
    for name, _ in MODES:
        mine = [r for r in runs if r["mode"] == name]
        summary[name] = {k: statistics.median(r[k] for r in mine)
                         for k in mine[0] if k.endswith(("_mbps", "_vs_aes"))}
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines()
                if l.startswith("Model name")), "unknown CPU")
    doc = {"bench": "transport-compare",
           "date": earlier["date"] if a.report else
           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{cpu}, {os.cpu_count()} cores", "repeats": a.repeats,
           "rounds": a.rounds, "runs": runs, "median": summary}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    lines = [f"Measured {doc['date']} on {doc['machine']} (`bench/transport/compare.py --repeats "
             f"{a.repeats}`: each round runs the four back to back, {a.rounds} pulls and "
             f"{a.rounds} pushes of 206,606,336 bytes each; `later` = median of the streams after "
             f"the first; % = share of the same run's one-core AES-256-GCM; raw: "
             f"`bench/results/{os.path.basename(a.out)}`).", "",
             "| round | mode | AES-256-GCM MB/s | pull later | push later | pull all | push all |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(
            f"| {r['repeat']} | {r['mode']} | {r['aes_gcm_mbps']:.0f} | "
            f"{r['pull_later_mbps']:.0f} ({r['pull_later_vs_aes']:.0%}) | "
            f"{r['push_later_mbps']:.0f} ({r['push_later_vs_aes']:.0%}) | "
            f"{r['pull_all_mbps']:.0f} ({r['pull_all_vs_aes']:.0%}) | "
            f"{r['push_all_mbps']:.0f} ({r['push_all_vs_aes']:.0%}) |")
    lines += ["", "Medians over the rounds:", "",
              "| mode | pull later | push later | pull all | push all |", "|---|---|---|---|---|"]
    for name, _ in MODES:
        s = summary[name]
        lines.append(f"| {name} | {s['pull_later_mbps']:.0f} ({s['pull_later_vs_aes']:.0%}) | "
                     f"{s['push_later_mbps']:.0f} ({s['push_later_vs_aes']:.0%}) | "
                     f"{s['pull_all_mbps']:.0f} ({s['pull_all_vs_aes']:.0%}) | "
                     f"{s['push_all_mbps']:.0f} ({s['push_all_vs_aes']:.0%}) |")
    table = "\n".join(lines)
    print(table)
    if not a.no_results_md:
        replace_section("transport-compare", "### gRPC streams and the bulk lane, interleaved\n\n"
                        + table)


if __name__ == "__main__":
    main()
