#!/usr/bin/env bash
# Which up/down codec pair `make demo` uses by default (issue 16, item 6): `atoll simulate` with
# the demo's own settings (4 sites, 8 rounds × 25 inner steps, its model and data), once per
# (pair, seed). Each compressed pair is compared with the uncompressed run of the SAME seed
# (train.codec none, diloco.pull_codec exact): the paired bpb gap removes most of the
# seed-to-seed spread. The report (bench/demo_codecs/report.py) gives, per pair, the mean and
# standard error of the paired gaps and the total bytes against data-parallel.
#
# Usage: bench/demo_codecs/run.sh [--out FILE]
# Environment: ATOLL (default build/atoll), SEEDS (default "1 2 3 4 5"), PAIRS (default
# "int8/nvfp4 int4:256+zstd/int4:256+zstd int3:256+zstd/int3:256+zstd": UP/DOWN, "none/exact"
# always added; the 2026-12-02 table also had int8/int8), JOBS (parallel runs, default 2). Runs
# already in the output's run directory are kept (they are deterministic). Every run names its
# codecs, so the demo's own defaults do not change what a pair measures.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=bench/results/demo-codecs.json
[[ "${1:-}" == "--out" ]] && OUT="$2"
ATOLL=${ATOLL:-build/atoll}
SEEDS=${SEEDS:-"1 2 3 4 5"}
PAIRS=${PAIRS:-"int8/nvfp4 int4:256+zstd/int4:256+zstd int3:256+zstd/int3:256+zstd"}
JOBS=${JOBS:-2}
RUNS=${RUNS_DIR:-$(mktemp -d)}
echo "runs in $RUNS" >&2

one_run() {  # UP DOWN SEED
  local tag="$1_$2_$3" json="$RUNS/$1_$2_$3.json"
  tag=${tag//:/-}
  json=${json//:/-}
  [[ -s "$json" ]] && return 0
  "$ATOLL" simulate --http off --store "$RUNS/store-$tag" --seed "$3" --codec "$1" \
    --pull-codec "$2" --summary-json "$json.tmp" > "$RUNS/$tag.log" 2>&1
  mv "$json.tmp" "$json"
  rm -rf "$RUNS/store-$tag"
  echo "done $tag" >&2
}
export -f one_run
export ATOLL RUNS

for seed in $SEEDS; do
  for pair in none/exact $PAIRS; do echo "${pair%/*} ${pair#*/} $seed"; done
done | xargs -P "$JOBS" -L 1 bash -c 'one_run "$0" "$1" "$2"'

python3 bench/demo_codecs/report.py "$RUNS" "$OUT"
