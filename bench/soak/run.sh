#!/usr/bin/env bash
# Soak (bench/soak/soak.py): a DiLoCo run of the bench model (dim 64, 2 layers, 10 inner steps,
# int8 pushes with error feedback), 4 nodes, real processes over mTLS on loopback — once
# uninterrupted, then under a coordinator kill loop (SIGKILLed at random moments, restarted at
# once on the same store and port) and a node churn loop (a random node SIGKILLed at a random
# moment and started again with the same name, data and --state-dir; min_nodes 2). Each loop is
# compared round by round with the uninterrupted run. Records per loop: kills, rounds committed,
# rounds lost, hangs, the time from each restart to the next committed round, the nodes' exit
# codes, and whether every round's θ and the final one equal the uninterrupted run's.
#
#   bench/soak/run.sh [--quick] [--out FILE] [--no-results-md]
#
# Default: 100 kills per loop, 200 rounds, at most 10 minutes of kills per loop. --quick: 10
# kills, 40 rounds. Writes bench/results/soak.json (soak-quick.json with --quick, or --out);
# exits non-zero on a lost round, a hang, a node that did not exit 0, or a θ that differs.
# Not part of `make test` (its short version is tests/integration/crash_resume_test.cc,
# KillLoops.*).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,17 "$@"

if [[ $QUICK == 1 ]]; then KILLS=10; ROUNDS=40; else KILLS=100; ROUNDS=200; fi
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/soak-quick.json; else OUT=bench/results/soak.json; fi
fi
python3 bench/soak/soak.py --atoll "$ATOLL" --brown-dir "$BROWN_DIR" --out "$OUT" \
  --kills "$KILLS" --rounds "$ROUNDS" --nodes 4 --max-s 600
