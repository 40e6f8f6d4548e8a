#!/usr/bin/env bash
# Codec speed (issue 16, item 5): `atoll bench codecs` at 1 and 2 threads, with memcpy of the
# same input measured in the same process, into one JSON file.
#
# Each run encodes and decodes one 2^24-value tensor (64 MiB of fp32) per codec, best of
# --reps, GB/s of fp32 input both ways. With T threads a codec splits one message's encode and
# decode over T threads (fixed slices: the bytes are the same for every T) and memcpy is split
# in T parts. The date, the machine (lscpu model name, cores) and /proc/loadavg before and after
# each run are recorded with it: on a shared machine the ratio to memcpy is the figure to read.
#
# Usage: bench/compress/speed.sh [--out FILE]   (default bench/results/codec-speed.json)
# Environment: ATOLL (binary, default build/atoll), CODECS (comma-separated specs; default the
# bench's standard set), REPS (default 5), THREADS (space-separated; default "1 2").
set -euo pipefail
cd "$(dirname "$0")/../.."
ATOLL=${ATOLL:-build/atoll}
OUT=bench/results/codec-speed.json
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$ATOLL" ]] || { echo "no atoll binary at $ATOLL (build it first)" >&2; exit 1; }
CODEC_ARGS=()
[[ -n "${CODECS:-}" ]] && CODEC_ARGS=(--codecs "$CODECS")
read -r -a THREAD_LIST <<<"${THREADS:-1 2}"

runs=()
for t in "${THREAD_LIST[@]}"; do
  [[ $t =~ ^[1-9][0-9]*$ ]] || { echo "THREADS: '$t' is not a positive integer" >&2; exit 2; }
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  json=$(OMP_WAIT_POLICY=passive "$ATOLL" bench codecs --json --threads "$t" \
         --reps "${REPS:-5}" "${CODEC_ARGS[@]}")
  after=$(cut -d' ' -f1-3 /proc/loadavg)
  runs+=("$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["loadavg_before"]=sys.argv[2]; r["loadavg_after"]=sys.argv[3]; print(json.dumps(r))' "$json" "$before" "$after")")
done

python3 - "$OUT" "${runs[@]}" <<'PY'
import datetime, json, os, platform, re, subprocess, sys
out, runs = sys.argv[1], [json.loads(r) for r in sys.argv[2:]]
try:
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
except Exception:
    cpu = platform.processor() or "unknown CPU"
doc = {"bench": "codec-speed",
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
       "machine": "%s, %d cores" % (cpu, os.cpu_count() or 0), "runs": runs}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print("| threads | codec | encode GB/s | decode GB/s | encode / memcpy | load avg before → after |")
print("|---|---|---|---|---|---|")
for r in runs:
    print("| %d | memcpy | %.2f | | 100%% | %s → %s |" % (r["threads"], r["memcpy_gbps"],
          r["loadavg_before"], r["loadavg_after"]))
    for c in r["codecs"]:
        print("| %d | %s | %.2f | %.2f | %.0f%% | |" % (r["threads"], c["codec"], c["encode_gbps"],
              c["decode_gbps"], 100 * c["encode_vs_memcpy"]))
print("wrote " + out, file=sys.stderr)
PY
