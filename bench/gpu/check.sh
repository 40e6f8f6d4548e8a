#!/usr/bin/env bash
# GPU check of the CUDA backend: get the binaries (build them, or use bench/gpu/pack.sh's
# build-prebuilt/ when this machine cannot build the project), run every CUDA test (they must
# run, not skip), time quantize GB/s per format against device-to-device copy GB/s, the cuBLASLt
# GEMM paths, the MoE layer's forward + backward against a dense FFN of equal active FLOPs and
# the CUDA model's training tokens/s, then the CPU kernel tests if the budget allows.
#
# It carries on after a failure and reports every stage, so one run gives the whole picture:
# a test that fails is rerun alone (a CUDA fault poisons the rest of its process, so the first
# run's later failures may be collateral), and summary.json says which stage passed, failed or
# could not run. Exit status: 0 when every stage passed, 1 otherwise.
#
# Files in ${ATOLL_BENCH_OUT:-bench/out} (8 at most, so that a remote run can return them all):
#   build.log        configure + build output, or the prebuilt pack's load check
#   test_cuda.json   gtest's report of the full run;  test_cuda.log  its output + the reruns
#   bench_cuda.json  quantize / GEMM / MoE figures;    bench_model.json  model tokens/s
#   bench.log        the two benches' stderr;          test_kernels.log  CPU kernel tests
#   summary.json     every stage's status, the reruns and both benches' JSON
# Without a GPU it stops at once (one line, exit 1).
# Budget: under 8 minutes on one H200 (ATOLL_GPU_CHECK_BUDGET_S, default 470 s; a build there is
# most of it, timing ~1 minute).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${ATOLL_BENCH_OUT:-bench/out}"
BUILD="${ATOLL_GPU_BUILD_DIR:-build-gpu}"
PREBUILT=build-prebuilt
JOBS="$(nproc 2>/dev/null || echo 4)"
mkdir -p "$OUT"
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
# Every stage's timeout is cut to what is left of the budget, so the script ends (with its
# summary) inside the 8 minutes even when something hangs; summary.json is rewritten after each
# stage, so a run killed from outside still leaves the stages it finished.
BUDGET_S="${ATOLL_GPU_CHECK_BUDGET_S:-470}"
limit() {  # $1: the stage's own timeout; prints min($1, seconds left), at least 1 (timeout 0 = none)
  local left=$((BUDGET_S - $(elapsed)))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
out_of_time() { [ $((BUDGET_S - $(elapsed))) -lt 15 ]; }
say() { echo "bench/gpu/check.sh: $*" >&2; }

# Stage results: name -> "passed" | "failed: why" | "not run: why" | "skipped: why".
declare -A result
order=(gpu binaries tests_cuda bench_cuda bench_model tests_cpu_kernels)
for s in "${order[@]}"; do result[$s]="not run"; done
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null ||
  printf '"%s"' "$(printf '%s' "$1" | tr -d '"\\')"; }
# A file's JSON when it parses, else null.
json_or_null() {
  if [ -s "$1" ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; then
    cat "$1"
  else
    echo null
  fi
}
reruns="{}"
write_summary() {
  {
    printf '{"date": "%s", "elapsed_s": %d, "binaries_from": %s' \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(elapsed)" "$(json_str "${binaries_from:-none}")"
    for s in "${order[@]}"; do printf ', "%s": %s' "$s" "$(json_str "${result[$s]}")"; done
    printf ', "tests_cuda_reruns": %s' "$reruns"
    printf ', "bench": %s, "model": %s}\n' "$(json_or_null "$OUT/bench_cuda.json")" \
      "$(json_or_null "$OUT/bench_model.json")"
  } >"$OUT/summary.json"
}
finish() {
  write_summary
  local bad=0
  echo "== summary ($(elapsed)s; $OUT/summary.json)"
  for s in "${order[@]}"; do
    echo "  $s: ${result[$s]}"
    case "${result[$s]}" in passed | skipped*) ;; *) bad=1 ;; esac
  done
  exit "$bad"
}

# ---- GPU ----------------------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null; then
  result[gpu]="failed: nvidia-smi not found"
  say "nvidia-smi not found: this script needs a machine with an NVIDIA GPU and driver"
  write_summary
  exit 1
fi
if ! nvidia-smi -L | grep -q GPU; then
  result[gpu]="failed: nvidia-smi -L lists no GPU"
  say "no NVIDIA GPU visible (nvidia-smi -L lists none)"
  write_summary
  exit 1
fi
nvidia-smi -L
result[gpu]="passed"
# fp32 means fp32: an image that sets NVIDIA_TF32_OVERRIDE=1 would let cuBLAS run the fp32
# GEMMs in TF32 and fail every fp32 tolerance. 0 forbids TF32 for this run.
export NVIDIA_TF32_OVERRIDE=0

# ---- binaries: a matching pack, else a build here, else a stale pack ---------------------------
# Runtime libraries for the pack: its own lib/, then the CUDA toolkit's, then python3's nvidia-*
# packages (cuBLAS, NCCL and the runtime ship there too on images built around PyTorch).
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
done
py_libs="$(python3 -c 'import glob, os, site
print(":".join(d for sp in site.getsitepackages() for d in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))))' 2>/dev/null || true)"
use_pack() {  # $1: why; succeeds when the pack's binaries load here
  # Only for the pack's binaries (LDP, below): its libstdc++ must not replace a newer one in the
  # programs this script runs.
  LDP="$PWD/$PREBUILT/lib${cuda_libs}${py_libs:+:$py_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  chmod +x "$PREBUILT"/bin/* 2>/dev/null
  echo "== using $PREBUILT ($1)" | tee -a "$OUT/build.log"
  local b ok=0
  for b in test_cuda bench_cuda bench_cuda_model; do
    if LD_LIBRARY_PATH="$LDP" ldd "$PREBUILT/bin/$b" 2>&1 | grep -E "not found|version .* not found" >>"$OUT/build.log"; then
      ok=1
    fi
  done
  if [ "$ok" -ne 0 ] || ! LD_LIBRARY_PATH="$LDP" "$PREBUILT/bin/test_cuda" --gtest_list_tests >/dev/null 2>>"$OUT/build.log"; then
    say "the prebuilt binaries do not load here (missing libraries: see $OUT/build.log)"
    return 1
  fi
  # cuBLASLt is loaded at run time (kernels/cuda/cublaslt_library.h), so ldd cannot see a
  # missing or other-version libcublasLt: the pack needs the one of the toolkit it was built with.
  if ! LD_LIBRARY_PATH="$LDP" "$PREBUILT/bin/test_cuda" --gtest_filter='CublasLtLibrary.*' >>"$OUT/build.log" 2>&1; then
    say "the prebuilt binaries cannot load their cuBLASLt here (see $OUT/build.log)"
    return 1
  fi
  BIN="$PWD/$PREBUILT/bin"
  binaries_from="prebuilt ($1)"
  return 0
}
build_here() {  # succeeds when test_cuda was built; the benches are built one by one
  echo "== configure + build ($BUILD, -j$JOBS)" | tee -a "$OUT/build.log"
  if ! timeout "$(limit 120)" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATOLL_CUDA=ON \
    ${ATOLL_CMAKE_FLAGS:-} >>"$OUT/build.log" 2>&1; then
    say "cmake configure failed (missing build dependencies? log: $OUT/build.log)"
    return 1
  fi
  local t built=""
  for t in test_cuda bench_cuda bench_cuda_model; do
    if timeout "$(limit 400)" cmake --build "$BUILD" -j "$JOBS" --target "$t" >>"$OUT/build.log" 2>&1; then
      built="$built $t"
    else
      say "building $t failed (log: $OUT/build.log)"
    fi
  done
  BIN="$PWD/$BUILD"
  binaries_from="built here:$built"
  [[ " $built " == *" test_cuda "* ]]
}
BIN=""
LDP="${LD_LIBRARY_PATH:-}"
pack_hash=""
[ -f "$PREBUILT/tree.sha256" ] && pack_hash="$(cat "$PREBUILT/tree.sha256")"
tree_hash="$(bench/gpu/tree_hash.sh 2>/dev/null || echo unknown)"
: >"$OUT/build.log"
if [ -n "$pack_hash" ] && [ "$pack_hash" = "$tree_hash" ] && use_pack "matches the tree"; then
  result[binaries]="passed"
elif build_here; then
  result[binaries]="passed"
  [ "$binaries_from" = "built here: test_cuda bench_cuda bench_cuda_model" ] ||
    result[binaries]="failed: only $binaries_from (build.log)"
elif [ -n "$pack_hash" ] && use_pack "STALE: built from other sources than this tree"; then
  result[binaries]="failed: no build possible here; ran a stale pack (rerun bench/gpu/pack.sh)"
else
  result[binaries]="failed: cannot build here and no usable $PREBUILT (run bench/gpu/pack.sh on a machine with the build dependencies and copy build-prebuilt/ here)"
  tail -30 "$OUT/build.log"
  finish
fi

# ---- tests/cuda ---------------------------------------------------------------------------------
write_summary
echo "== tests/cuda"
cuda_rc=0
if out_of_time; then
  result[tests_cuda]="not run: time budget (the build took it)"
  finish
fi
LD_LIBRARY_PATH="$LDP" timeout "$(limit 300)" "$BIN/test_cuda" --gtest_output="json:$OUT/test_cuda.json" >"$OUT/test_cuda.log" 2>&1
cuda_rc=$?
cat "$OUT/test_cuda.log"
if [ "$cuda_rc" -eq 0 ]; then
  result[tests_cuda]="passed"
else
  # Rerun every test that did not pass or skip, each in a process of its own.
  all="$(LD_LIBRARY_PATH="$LDP" "$BIN/test_cuda" --gtest_list_tests 2>/dev/null |
    awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')"
  done_ok="$(grep -E '^\[ +(OK|SKIPPED) +\] ' "$OUT/test_cuda.log" | awk '{print $(NF-2)}' |
    sort -u)"
  failed_alone=()
  passed_alone=()
  reruns="{"
  for t in $all; do
    grep -qxF "$t" <<<"$done_ok" && continue
    if [ "$(elapsed)" -gt $((BUDGET_S - 200)) ]; then  # keep 200 s for the benches
      reruns="$reruns$([ "$reruns" = "{" ] || echo ", ")\"$t\": \"not rerun (time budget)\""
      continue
    fi
    echo "== rerun alone: $t" >>"$OUT/test_cuda.log"
    if LD_LIBRARY_PATH="$LDP" timeout "$(limit 60)" "$BIN/test_cuda" --gtest_filter="$t" >>"$OUT/test_cuda.log" 2>&1; then
      r=passed
      passed_alone+=("$t")
    else
      r=failed
      failed_alone+=("$t")
    fi
    echo "   $t alone: $r"
    reruns="$reruns$([ "$reruns" = "{" ] || echo ", ")\"$t\": \"$r\""
  done
  reruns="$reruns}"
  result[tests_cuda]="failed: exit $cuda_rc; alone: ${#failed_alone[@]} failed, ${#passed_alone[@]} passed (see tests_cuda_reruns)"
fi
# On a GPU machine nothing may skip for lack of a device (the 2-GPU tests may skip on 1 GPU).
if grep -q "no CUDA device" "$OUT/test_cuda.log"; then
  result[tests_cuda]="failed: tests skipped for lack of a CUDA device although nvidia-smi sees one"
fi

write_summary

# ---- timing -------------------------------------------------------------------------------------
# run_bench KEY BINARY JSON: one timing binary inside the budget, its JSON into $OUT/JSON and its
# stderr into bench.log; the stage's status in result[KEY].
run_bench() {
  local key=$1 bin=$2 json=$3
  if out_of_time; then
    result[$key]="not run: time budget"
  elif [ -x "$BIN/$bin" ]; then
    if LD_LIBRARY_PATH="$LDP" timeout "$(limit 180)" "$BIN/$bin" >"$OUT/$json" 2>>"$OUT/bench.log"; then
      result[$key]="passed"
    else
      result[$key]="failed: exit $? (bench.log)"
    fi
    cat "$OUT/$json"
  else
    result[$key]="not run: no binary"
  fi
  write_summary
}
echo "== timing"
: >"$OUT/bench.log"
run_bench bench_cuda bench_cuda bench_cuda.json
# Tokens/s of the CUDA training path (algorithms/cuda): the bench config and a larger one.
echo "== model tokens/s"
run_bench bench_model bench_cuda_model bench_model.json
cat "$OUT/bench.log"
write_summary

# ---- CPU kernel tests: they need the whole project built (their target depends on the atoll
# binary), so only in a build here, and only while the 8-minute budget allows.
if [[ "${binaries_from:-}" != built* ]]; then
  result[tests_cpu_kernels]="skipped: prebuilt binaries (CI runs them)"
elif [ "$(elapsed)" -ge 240 ]; then
  result[tests_cpu_kernels]="skipped: over 4 minutes already spent"
else
  echo "== CPU kernel tests (brief)"
  if ! timeout "$(limit 200)" cmake --build "$BUILD" -j "$JOBS" --target test_kernels >>"$OUT/build.log" 2>&1; then
    result[tests_cpu_kernels]="failed: could not build test_kernels (build.log)"
  elif timeout "$(limit 60)" "$BUILD/test_kernels" --gtest_brief=1 >"$OUT/test_kernels.log" 2>&1; then
    result[tests_cpu_kernels]="passed"
  else
    tail -20 "$OUT/test_kernels.log"
    result[tests_cpu_kernels]="failed: see test_kernels.log"
  fi
fi
finish
