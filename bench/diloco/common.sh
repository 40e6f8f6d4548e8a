# Shared by bench/diloco/run.sh (the table) and bench/diloco/tune.sh (the outer step per cell),
# sourced after bench_args (bench/common.sh): the model, the inner optimiser, the warm start and one run.

# Model and inner optimiser: the same for every row (docs/decisions.md, "DiLoCo benchmark").
MODEL=(--dim 64 --layers 2 --heads 4 --ffn 192 --seq 64 --batch 8)
LR=${DILOCO_LR:-3e-3}
EVAL_TOKENS=32768
PULL=${DILOCO_PULL:-bf16}
# Inner steps per node T (R = T / H rounds) and warm-start steps W of the base model (default
# W = 3000 since 2026-11-30; the tables before used W = 1000; --quick:
# T = 200, W = 1000; W = 300 before 2026-11-30).
if [[ $QUICK == 1 ]]; then
  TOTAL=${DILOCO_TOTAL:-200}
  WARM=${DILOCO_WARM:-1000}
else
  TOTAL=${DILOCO_TOTAL:-500}
  WARM=${DILOCO_WARM:-3000}
fi
# Seed of the base model (its init and data order); the same base model for the table and the
# tuning runs, which differ in the DiLoCo seed (the nodes' data order).
WARM_SEED=${DILOCO_WARM_SEED:-1234}

# diloco_warm_start DIR: trains the base model (one worker, all of Brown, W steps, the inner
# optimiser's lr and cosine schedule over W) with `atoll train` and prints the checkpoint's
# path; prints nothing for W = 0 (random init, the runs before 2026-11-30).
diloco_warm_start() {
  local dir=$1
  [[ $WARM -gt 0 ]] || return 0
  "$ATOLL" train --data brown --brown-dir "$BROWN_DIR" "${MODEL[@]}" --lr "$LR" --steps "$WARM" \
    --seed "$WARM_SEED" --threads 1 --log-every 500 --eval-every 0 --eval-tokens "$EVAL_TOKENS" \
    --out "$dir" >"$dir.log" 2>&1 || { tail -n 20 "$dir.log" >&2; return 1; }
  echo "$dir/checkpoint.safetensors"
}

# diloco_run TAG SPLIT M H CODEC PULL OUTER_LR OUTER_MOM SEED INIT [demo flags...]: one
# `atoll demo` run, its log and summary as $WORK/TAG.log and $WORK/TAG.json. INIT is a
# checkpoint or "" (random init). Returns non-zero (with the log's tail) when the run fails.
diloco_run() {
  local tag=$1 split=$2 m=$3 h=$4 codec=$5 pull=$6 olr=$7 omom=$8 seed=$9 init=${10}
  shift 10
  local init_args=()
  [[ -n $init ]] && init_args=(--init-from "$init")
  if ! "$ATOLL" demo --nodes "$m" --rounds $((TOTAL / h)) --inner-steps "$h" --codec "$codec" \
      --pull-codec "$pull" --split "$split" "${MODEL[@]}" --lr "$LR" --outer-lr "$olr" \
      --outer-momentum "$omom" --eval-tokens "$EVAL_TOKENS" --seed "$seed" --threads 1 \
      "${init_args[@]+"${init_args[@]}"}" --http off --brown-dir "$BROWN_DIR" \
      --store "$WORK/$tag" --summary-json "$WORK/$tag.json" "$@" >"$WORK/$tag.log" 2>&1; then
    echo "FAILED"
    tail -n 30 "$WORK/$tag.log" >&2
    return 1
  fi
  rm -rf "${WORK:?}/$tag"
}

diloco_check_grid() {
  local h
  for h in "$@"; do
    if ((TOTAL % h != 0)); then
      echo "bench/diloco: T = $TOTAL inner steps is not a multiple of H = $h (set DILOCO_TOTAL)" >&2
      exit 2
    fi
  done
}
