#!/usr/bin/env bash
# `make bench`: the CPU training-step benchmark of the issue, Atoll against PyTorch eager.
#
# Runs `atoll bench train` and bench/torch_reference.py on the same config and thread count,
# prints the JSON lines, the ratio of tokens/s (atoll / torch) and Atoll's fraction of the
# machine's own sgemm, and writes bench/results/train.json (both median runs, every round's
# tokens/s, ratio, date, machine, load average).
#
# Environment (all optional):
#   BUILD_DIR          where atoll was built (default: build)
#   THREADS            threads for both sides (default: 2)
#   ATOLL_STEPS        timed steps for atoll (default: 20)
#   TORCH_STEPS        timed steps for PyTorch (default: 10)
#   ROUNDS             alternating runs of each side; the median run is reported (default: 3)
#   PYTHON             Python with torch (default: /usr/bin/python3, Debian's python3-torch)
#   OMP_WAIT_POLICY    passed to both (default: passive, see below)
#
# Both sides use OpenMP (libgomp). By default its idle threads spin at every barrier; on a
# machine whose cores are shared with other work, a spinning thread burns the core its
# descheduled partner needs and both engines run several times slower. The benchmark therefore
# runs both with OMP_WAIT_POLICY=passive unless the caller sets it (record which in RESULTS.md).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
ATOLL_STEPS=${ATOLL_STEPS:-20}
TORCH_STEPS=${TORCH_STEPS:-10}
ROUNDS=${ROUNDS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

ATOLL="$BUILD_DIR/atoll"
if [[ ! -x "$ATOLL" ]]; then
  echo "bench: $ATOLL not found; build first (make build)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "bench: $PYTHON cannot import torch; install python3-torch (apt-get install python3-torch) or set PYTHON" >&2
  exit 1
fi

# PyTorch's BLAS is OpenBLAS too: give it the kernels atoll runs with (atoll picks them by CPU
# features where OpenBLAS does not know the CPU, kernels/cpu/backend_info.h), so that neither
# side is measured on OpenBLAS's generic fallback kernels.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  export OPENBLAS_CORETYPE
  OPENBLAS_CORETYPE=$("$ATOLL" --version | sed -n 's/.*OpenBLAS kernels \([A-Za-z0-9]*\);.*/\1/p')
fi
echo "bench: OpenBLAS kernels $OPENBLAS_CORETYPE for both sides"

CONFIG=(--layers 4 --dim 256 --heads 4 --ffn 768 --seq 256 --batch 8 --vocab 256 --threads "$THREADS")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench: load average $LOAD_BEFORE, $(nproc) cores, OMP_WAIT_POLICY=$OMP_WAIT_POLICY"

# Rounds alternate the two sides so that both meet the same load; each side's reported run is
# its median round by tokens/s.
ATOLL_RUNS=()
TORCH_RUNS=()
for ((r = 1; r <= ROUNDS; r++)); do
  ATOLL_RUNS+=("$("$ATOLL" bench train "${CONFIG[@]}" --steps "$ATOLL_STEPS" --json)")
  echo "${ATOLL_RUNS[-1]}"
  TORCH_RUNS+=("$("$PYTHON" bench/torch_reference.py "${CONFIG[@]}" --steps "$TORCH_STEPS" --json)")
  echo "${TORCH_RUNS[-1]}"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p bench/results
CPU_MODEL=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
ATOLL_JSON=$(printf '%s\n' "${ATOLL_RUNS[@]}") TORCH_JSON=$(printf '%s\n' "${TORCH_RUNS[@]}") CPU_MODEL="$CPU_MODEL" NPROC="$(nproc)" \
  LOAD_BEFORE="$LOAD_BEFORE" LOAD_AFTER="$LOAD_AFTER" \
  "$PYTHON" - <<'EOF'
import datetime
import json
import os

def median_run(lines):
    runs = sorted((json.loads(l) for l in lines.splitlines() if l.strip()),
                  key=lambda r: r["tokens_per_s"])
    return runs[len(runs) // 2], [r["tokens_per_s"] for r in runs]


atoll, atoll_all = median_run(os.environ["ATOLL_JSON"])
torch, torch_all = median_run(os.environ["TORCH_JSON"])
ratio = atoll["tokens_per_s"] / torch["tokens_per_s"]
out = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": {"cpu": os.environ["CPU_MODEL"], "nproc": int(os.environ["NPROC"])},
    "load_average_before": os.environ["LOAD_BEFORE"],
    "load_average_after": os.environ["LOAD_AFTER"],
    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    "rounds": len(atoll_all),
    "atoll": atoll,
    "torch": torch,
    "atoll_tokens_per_s_all_rounds": atoll_all,
    "torch_tokens_per_s_all_rounds": torch_all,
    "ratio_tokens_per_s": round(ratio, 3),
    "fraction_of_sgemm": atoll["fraction_of_sgemm"],
}
tmp = "bench/results/train.json.tmp"
with open(tmp, "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
os.replace(tmp, "bench/results/train.json")
print(
    f"atoll/torch tokens/s: {ratio:.2f}x (target >= 2) | atoll {atoll['gflops']:.1f} GFLOP/s = "
    f"{100 * atoll['fraction_of_sgemm']:.0f}% of sgemm {atoll['sgemm_gflops']:.1f} GFLOP/s "
    f"(target >= 50%) | wrote bench/results/train.json"
)
EOF
