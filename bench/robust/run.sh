#!/usr/bin/env bash
# Attacks on aggregation: validation bpb of `atoll simulate` runs of the demo model (dim 128,
# 4 layers, 0.9M parameters) in which the last K sites are Byzantine (simulate/byzantine.h): each
# trains honestly, then sends sign-flip (-10 x its update), gaussian (noise of 10 x its norm),
# scale (10^6 x its update), tokens (a claim of 2^63 - 1 tokens), replay (its previous push,
# byte for byte) or stale (its honest update one round late); `absent` runs without the K sites
# (the best an aggregator that leaves them out can do). Two settings: the default [robust]
# section, and the plain token-weighted mean without screening (screen = off), which shows that
# the attacks are real. Each seed is a paired trial: its attacked runs are compared with the
# honest run (K = 0) of the same setting, site count and seed; report.py gives the mean and
# standard error of the paired gaps. Sites sample every Brown genre (--split iid): with the
# demo's genre split, the attacker's genres are missing from every attacked run whatever the
# coordinator does (README.md). Runs are serial, one kernel thread per site, nice -n 10.
#
#   bench/robust/run.sh [--quick] [--out FILE] [--no-results-md]
#   ROBUST_SEEDS="1 2 3 4 5" ROBUST_SETTINGS=default ROBUST_GRID="8:2" bench/robust/run.sh
#
# Default: seed 1234, 4 sites with 1 Byzantine and 8 sites with 2, 6 rounds x 10 inner steps,
# every attack in both settings (30 runs, about 35 minutes on 2 idle cores: 30-45 s a 4-site
# run, 45-70 s an 8-site one). --quick: 4 sites with 1 Byzantine, 3 rounds x 5 steps, the
# default setting only, sign-flip and scale (3 runs, about a minute).
# Writes bench/results/robust.json (--quick: robust-quick.json; or --out) and, unless
# --no-results-md, the table into bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,23 "$@"

if [[ $QUICK == 1 ]]; then
  GRID="4:1"; ROUNDS=3; INNER=5; ATTACKS="sign-flip scale"; SETTINGS="default"
else
  GRID="4:1 8:2"; ROUNDS=6; INNER=10; ATTACKS="sign-flip gaussian scale tokens replay stale absent"
  SETTINGS="default mean-no-screening"
fi
# ROBUST_ATTACKS="replay stale": only these attacks (and the honest runs) are run again; their
# rows replace the ones of the same setting, sites and attack in the existing JSON, whose other
# rows are kept (the table is written from all of them).
MERGE=0
# ROBUST_SETTINGS="default" likewise runs only these settings.
if [[ -n ${ROBUST_ATTACKS:-} ]]; then ATTACKS=$ROBUST_ATTACKS; MERGE=1; fi
if [[ -n ${ROBUST_SETTINGS:-} ]]; then SETTINGS=$ROBUST_SETTINGS; MERGE=1; fi
# ROBUST_REUSE_HONEST=1 (with a merge): the honest runs are not run again; each attacked row is
# compared with the honest row of its setting and site count in the existing JSON (an honest
# run gives the same θ for the same config and seed).
REUSE_HONEST=$(( MERGE == 1 && ${ROBUST_REUSE_HONEST:-0} == 1 ? 1 : 0 ))
EVAL_TOKENS=8192
# ROBUST_SEEDS="1 2 3 4 5": paired trials, each seed's attacked runs compared with its own
# honest run (same seed: same initial θ, data order and attacker draws). The default, the single
# seed 1234, reproduces the committed rows of before paired seeds.
SEEDS=${ROBUST_SEEDS:-1234}
if [[ -n ${ROBUST_SEEDS:-} ]]; then MERGE=1; fi
# ROBUST_GRID="8:2": only these site counts (sites:byzantine).
if [[ -n ${ROBUST_GRID:-} ]]; then GRID=$ROBUST_GRID; MERGE=1; fi
# ROBUST_KEEP_DIR=DIR: each run's summary JSON and log are copied there.
KEEP_DIR=${ROBUST_KEEP_DIR:-}
[[ -z $KEEP_DIR ]] || mkdir -p "$KEEP_DIR"
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/robust-quick.json; else OUT=bench/results/robust.json; fi
fi
# The committed rows' θ come from OpenBLAS's Haswell kernels (bench/robust/README.md, the
# extension's precondition): pinned here so that a rerun reproduces them on any CPU with AVX2
# and FMA, whatever kernels atoll would pick there. OPENBLAS_CORETYPE set by the caller wins.
if [[ -z ${OPENBLAS_CORETYPE:-} ]] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=Haswell
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The host's CPU, OpenBLAS kernels and the build's vector instructions go into every row: the
# same seed gives the same θ only on a host where they agree (bench/robust/README.md).
"$ATOLL" --version | sed -n 2p > "$work/host"

setting_flags() {  # setting -> the [robust] flags of `atoll simulate`
  case "$1" in
    default) ;;  # the [robust] defaults (docs/configuration.md)
    mean-no-screening) echo "--screen off --aggregator mean" ;;
  esac
}

names=()
run() {  # setting, sites, byzantine, attack, seed
  local setting=$1 sites=$2 byz=$3 attack=$4 seed=$5
  local name="$setting-$sites-$byz-$attack-$seed"
  local attack_flags=() nodes=$sites
  if [[ $attack == absent ]]; then
    nodes=$(( sites - byz ))  # the K attacker sites never join: the other sites, same data
  elif [[ $byz -gt 0 ]]; then
    attack_flags=(--byzantine "$byz" --attack "$attack")
  fi
  echo "robust: $name ..." >&2
  # shellcheck disable=SC2046
  # Codecs pinned to none / exact pulls: the benchmark measures the aggregation, and its rows
  # were measured so (the demo's compressing defaults came later).
  OMP_WAIT_POLICY=passive nice -n 10 \
  "$ATOLL" simulate --nodes "$nodes" --rounds "$ROUNDS" --inner-steps "$INNER" --http off --split iid \
    --codec none --pull-codec exact --seed "$seed" --threads 1 \
    --eval-tokens "$EVAL_TOKENS" --brown-dir "$BROWN_DIR" --store "$work/run-$name" \
    --summary-json "$work/summary-$name.json" $(setting_flags "$setting") "${attack_flags[@]}" \
    > "$work/log-$name.txt" 2>&1 || {
    # A run that ends in an error (e.g. a site's inner loss no longer finite) counts as
    # diverged; its last line says why.
    tail -n 3 "$work/log-$name.txt" >&2
    python3 - "$work/summary-$name.json" "$setting" "$(tail -n 1 "$work/log-$name.txt")" <<'PY'
import json, sys
path, setting, why = sys.argv[1:4]
plain = setting == "mean-no-screening"
json.dump({"final_val_bpb": None, "aggregator": "mean", "screen": "off" if plain else "drop",
           "norm_multiple": 5, "updates_clipped": None, "updates_dropped": None,
           "max_norm_ratio": None, "final_fingerprint": "", "wall_s": None, "failed": why},
          open(path, "w"))
PY
  }
  cut -d' ' -f1 /proc/loadavg > "$work/load-$name"
  rm -rf "$work/run-$name"
  # ROBUST_KEEP_DIR: the run's summary, log and load average, to check the figures later.
  [[ -z $KEEP_DIR ]] || cp "$work/summary-$name.json" "$work/log-$name.txt" "$work/load-$name" "$KEEP_DIR/"
  names+=("$setting:$sites:$byz:$attack:$seed")
}

# Seeds outermost within a setting and site count: a run cut short still leaves whole pairs.
for setting in $SETTINGS; do
  for g in $GRID; do
    sites=${g%%:*}; byz=${g##*:}
    for seed in $SEEDS; do
      [[ $REUSE_HONEST == 1 ]] || run "$setting" "$sites" 0 none "$seed"
      for attack in $ATTACKS; do
        # `absent` (the attacker sites never join) has no attacker to screen: default only.
        [[ $attack == absent && $setting != default ]] && continue
        run "$setting" "$sites" "$byz" "$attack" "$seed"
      done
    done
  done
done

python3 bench/robust/report.py "$OUT" "$WRITE_MD" "$ROUNDS" "$INNER" "$EVAL_TOKENS" "$work" "$MERGE" \
  "$REUSE_HONEST" "${names[@]}"
