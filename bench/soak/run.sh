#!/usr/bin/env bash
# Soak: the coordinator SIGKILLed at random moments of a DiLoCo run, restarted at once on the
# same store and port each time (bench/soak/coordinator_kills.py). The bench model (dim 64,
# 2 layers, 10 inner steps), 4 nodes, min_nodes 2, real processes over mTLS on loopback.
# Records rounds committed, hangs (a restarted coordinator with no committed round within 30 s),
# nodes that exited, and the time from each restart to its first committed round.
#
#   bench/soak/run.sh [--quick] [--out FILE] [--no-results-md]
#
# Default: 100 kills, at most 15 minutes. --quick: 10 kills. Writes bench/results/soak.json
# (soak-quick.json with --quick, or --out); exits non-zero on a hang or a node that did not
# stop cleanly. Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,12 "$@"

if [[ $QUICK == 1 ]]; then KILLS=10; else KILLS=100; fi
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/soak-quick.json; else OUT=bench/results/soak.json; fi
fi
python3 bench/soak/coordinator_kills.py --atoll "$ATOLL" --brown-dir "$BROWN_DIR" --out "$OUT" \
  --kills "$KILLS" --nodes 4 --max-s 900
