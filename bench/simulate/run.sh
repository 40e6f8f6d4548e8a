#!/usr/bin/env bash
# `atoll simulate` at scale: N virtual sites of the demo model (dim 128, 4 layers, 0.8M
# parameters, batch 8 x seq 128 per site and step) in one process on this machine, for
# N = 1, 8 and 64. Records per N the peak resident memory of the process, rounds/s and the wall
# time, and derives the memory each extra site costs: (RSS(64) - RSS(1)) / 63.
#
#   bench/simulate/run.sh [--quick] [--out FILE] [--no-results-md]
#
# --quick: N = 1, 8 and 16 with 5 inner steps (about a minute). Default: 2 rounds x 25 inner
# steps. Writes bench/results/simulate.json (or --out); the table goes into bench/RESULTS.md by
# hand from that file.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,11 "$@"

if [[ $QUICK == 1 ]]; then SITES="1 8 16"; INNER=5; else SITES="1 8 64"; INNER=25; fi
ROUNDS=2
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/simulate-quick.json; else OUT=bench/results/simulate.json; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rows=()
for n in $SITES; do
  echo "simulate: $n sites, $ROUNDS rounds x $INNER inner steps ..." >&2
  # The codecs of the committed results (the demo's defaults before 2026-12-02).
  "$ATOLL" simulate --nodes "$n" --rounds "$ROUNDS" --inner-steps "$INNER" --http off \
    --codec none --pull-codec exact --eval-tokens 4096 --brown-dir "$BROWN_DIR" --store "$work/run-$n" \
    --summary-json "$work/summary-$n.json" > "$work/log-$n.txt" 2>&1 ||
    { cat "$work/log-$n.txt" >&2; exit 1; }
  rows+=("$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(json.dumps({
    "sites": int(sys.argv[2]), "peak_rss_bytes": s["peak_rss_bytes"],
    "rounds_per_s": s["rounds_per_s"], "wall_s": s["wall_s"],
    "final_val_bpb": s["final_val_bpb"], "final_fingerprint": s["final_fingerprint"]}))' \
    "$work/summary-$n.json" "$n")")
done

python3 - "$OUT" "$ROUNDS" "$INNER" "${rows[@]}" <<'PY'
import datetime, json, os, platform, sys
out, rounds, inner, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [json.loads(r) for r in sys.argv[4:]]
first, last = rows[0], rows[-1]
per_site = (last["peak_rss_bytes"] - first["peak_rss_bytes"]) / max(last["sites"] - first["sites"], 1)
model = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip(); break
except OSError:
    pass
doc = {"date": datetime.date.today().isoformat(), "machine": f"{model}, {os.cpu_count()} cores",
       "load_average": os.getloadavg()[0], "rounds": rounds, "inner_steps": inner,
       "model": "demo: dim 128, 4 layers, 4 heads, ffn 384, seq 128, batch 8",
       "rows": rows, "bytes_per_extra_site": per_site}
json.dump(doc, open(out, "w"), indent=1)
print(f"{'sites':>6} {'peak RSS MB':>12} {'rounds/s':>9} {'wall s':>8}")
for r in rows:
    print(f"{r['sites']:>6} {r['peak_rss_bytes']/1e6:>12.1f} {r['rounds_per_s']:>9.4f} {r['wall_s']:>8.1f}")
print(f"memory per extra site: {per_site/1e6:.2f} MB  -> {out}")
PY
