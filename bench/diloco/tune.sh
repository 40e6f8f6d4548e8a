#!/usr/bin/env bash
# The outer step of bench/diloco/run.sh, chosen per (M, H) on a tuning seed (issue 3).
#
# For every M >= 2 and H of the grid, DiLoCo (IID sites, int8 pushes, bf16 pulls, from the same
# warm-started base model as the table) runs once per outer (lr, momentum) candidate with the
# tuning seed, which only the data order depends on; the candidate with the lowest validation
# bpb is chosen for the cell. The table (run.sh) then runs on its own seed with these choices,
# so no row of the table is chosen on its own result. Data-parallel is not run here: it does not
# depend on the outer step.
#
# Usage: bench/diloco/tune.sh [--quick] [--out FILE]
#   --quick     M in {2, 4}, H in {10, 50}, T = 200, W = 1000 (the quick table's grid)
#   --out FILE  JSON (default bench/results/diloco-outer.json, quick: diloco-outer-quick.json)
# Environment: as run.sh (ATOLL, BROWN_DIR, DILOCO_TOTAL, DILOCO_WARM, DILOCO_NODES, DILOCO_H),
# DILOCO_TUNE_SEED (default 99), DILOCO_TUNE_OUTER (candidates "lr/momentum ...", default
# "0.7/0.9 1.0/0.9 1.0/0": the DiLoCo paper's, a longer outer step, plain averaging).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,19 "$@"
source bench/diloco/common.sh

SEED=${DILOCO_TUNE_SEED:-99}
read -r -a CANDIDATES <<<"${DILOCO_TUNE_OUTER:-0.7/0.9 1.0/0.9 1.0/0}"
if [[ $QUICK == 1 ]]; then
  NODES_GRID=(2 4)
  H_GRID=(10 50)
  OUT=${OUT:-bench/results/diloco-outer-quick.json}
else
  NODES_GRID=(2 4 8)
  H_GRID=(10 50 100)
  OUT=${OUT:-bench/results/diloco-outer.json}
fi
if [[ -n ${DILOCO_NODES:-} ]]; then read -r -a NODES_GRID <<<"$DILOCO_NODES"; fi
if [[ -n ${DILOCO_H:-} ]]; then read -r -a H_GRID <<<"$DILOCO_H"; fi
diloco_check_grid "${H_GRID[@]}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-diloco-tune-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"
INIT=$(diloco_warm_start "$WORK/warm")
n=$((${#NODES_GRID[@]} * ${#H_GRID[@]} * ${#CANDIDATES[@]}))
echo "bench/diloco/tune: $n runs, T = $TOTAL, warm start W = $WARM, seed $SEED, candidates" \
     "${CANDIDATES[*]}"
start=$SECONDS
i=0
tags=()
for m in "${NODES_GRID[@]}"; do
  for h in "${H_GRID[@]}"; do
    for c in "${CANDIDATES[@]}"; do
      olr=${c%/*}
      omom=${c#*/}
      i=$((i + 1))
      tag="m${m}-h${h}-lr${olr}-mom${omom}"
      printf '[%2d/%d] M=%d H=%d outer %s / %s ... ' "$i" "$n" "$m" "$h" "$olr" "$omom"
      diloco_run "$tag" iid "$m" "$h" int8 "$PULL" "$olr" "$omom" "$SEED" "$INIT"
      python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["final_val_bpb"])' \
        "$WORK/$tag.json"
      tags+=("$tag")
    done
  done
done

python3 - "$WORK" "$OUT" "$SEED" "$TOTAL" "$WARM" "${MODEL[*]}" "$LR" "$((SECONDS - start))" \
    "${tags[@]}" <<'PYEOF'
import json, os, sys
work, out, seed, total, warm, model, lr, secs = sys.argv[1:9]
runs = []
for tag in sys.argv[9:]:
    s = json.load(open(os.path.join(work, tag + ".json")))
    runs.append({"nodes": s["nodes"], "inner_steps": s["inner_steps"], "outer_lr": s["outer_lr"],
                 "outer_momentum": s["outer_momentum"], "val_bpb": s["final_val_bpb"]})
chosen = {}
for r in runs:
    key = "%d-%d" % (r["nodes"], r["inner_steps"])
    if key not in chosen or r["val_bpb"] < chosen[key]["val_bpb"]:
        chosen[key] = r
doc = {"settings": {"seed": int(seed), "total_inner_steps_per_node": int(total),
                    "warm_start_steps": int(warm), "model": model, "lr": float(lr),
                    "split": "iid", "push": "int8", "pull": "bf16", "grid_wall_s": int(secs)},
       "runs": runs,
       "chosen": {k: {"outer_lr": v["outer_lr"], "outer_momentum": v["outer_momentum"],
                      "val_bpb": v["val_bpb"]} for k, v in sorted(chosen.items())}}
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
for k, v in sorted(chosen.items()):
    print("M-H %s: outer lr %g, momentum %g (bpb %.4f)" % (k, v["outer_lr"], v["outer_momentum"],
                                                         v["val_bpb"]))
print("wrote %s" % out)
PYEOF
