#!/bin/sh
# Builds the decoder fuzz targets with clang's libFuzzer + ASan/UBSan and runs each for a
# bounded budget, seeded with valid inputs (tests/fuzz/make_seeds.cc):
#   codec_decode, sparse_delta_decode, safetensors_decode, and chunk_assembler and bulk_frame
#   when the generated protobuf code is available (FUZZ_PROTO_GEN=<build>/gen; CTest sets it).
# Usage (from the repository root):
#   tests/fuzz/run.sh runs=N    N inputs per target from libFuzzer seed 1 and the seed inputs
#                               only: the same run every time (make test; CTest passes it)
#   tests/fuzz/run.sh [SECONDS] SECONDS in all (default 60), split over the targets; the corpus
#                               under $FUZZ_OUT/run/ grows from run to run (bench/fuzz/run.sh)
#   tests/fuzz/run.sh build     compiles and links the targets without running them (the
#                               build's fuzz_targets step, so that make test only fuzzes)
# Exits 77 (CTest's "skipped") when clang++ or its libFuzzer runtime is missing (0 with build). Objects are
# reused across runs until a source or header under algorithms/, kernels/, transport/ or
# tests/fuzz/ changes; with ccache installed (FUZZ_CCACHE=0 turns it off) an object whose
# source and headers did not change comes from its cache.
set -eu
budget=${1:-60}
build_only=""
case "$budget" in
  build) build_only=1 runs=1 secs="" ;;
  runs=*) runs=${budget#runs=} secs="" ;;
  *) runs="" secs=$budget ;;
esac
skipped=77
[ -n "$build_only" ] && skipped=0
case "$runs$secs" in
  ''|*[!0-9]*)
    echo "fuzz: bad budget '$budget': give SECONDS or runs=N (a positive whole number)" >&2
    exit 2 ;;
esac
out=${FUZZ_OUT:-build/fuzz}
cxx=${FUZZ_CXX:-clang++}
gen=${FUZZ_PROTO_GEN:-}
mkdir -p "$out"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: $cxx not found (install clang to run the decoder fuzz targets)"
  exit $skipped
fi
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$out/probe.cc"
if ! "$cxx" -fsanitize=fuzzer "$out/probe.cc" -o "$out/probe" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: $cxx cannot link -fsanitize=fuzzer (libFuzzer runtime missing)"
  exit $skipped
fi

proto_flags=""
proto_libs=""
proto_srcs=""
if [ -n "$gen" ] && [ -f "$gen/transport/proto/atoll.pb.cc" ]; then
  proto_flags="-DATL_FUZZ_PROTO -I$gen"
  proto_libs="-lprotobuf -lxxhash"
  proto_srcs="$gen/transport/proto/atoll.pb.cc transport/tensor_stream.cc transport/bulk_frame.cc
              transport/payload_digest.cc kernels/core/sha256.cc kernels/core/huge_pages.cc"
else
  echo "fuzz: chunk_assembler and bulk_frame targets skipped (set FUZZ_PROTO_GEN to the build's gen/ directory)"
fi

san="-fsanitize=address,undefined -fno-sanitize-recover=all"
flags="-std=c++20 -O1 -g -I. $proto_flags"
srcs="algorithms/compress/*.cc kernels/formats/*.cc kernels/core/philox.cc kernels/core/status.cc
      kernels/core/check.cc kernels/core/crc32c.cc kernels/core/number_text.cc
      algorithms/model/safetensors.cc algorithms/data/json_duplicates.cc
      algorithms/model/param_set.cc"
cc="$cxx"
if [ "${FUZZ_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then cc="ccache $cxx"; fi
lib="$out/libfuzzdeps.a"
stamp="$out/libfuzzdeps.flags"
# The stamp holds the flags and the source list: a source added to the list rebuilds the library.
if [ ! -f "$lib" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$(echo $flags $srcs)" ] ||
   [ -n "$(find algorithms kernels transport tests/fuzz $gen -newer "$lib" \( -name '*.cc' -o -name '*.h' \) 2>/dev/null | head -1)" ]; then
  echo "fuzz: compiling the decoders with $cc (ASan, UBSan)"
  rm -rf "$out/obj" && mkdir -p "$out/obj"
  # shellcheck disable=SC2086
  for s in $srcs $proto_srcs; do echo "$s"; done |
    xargs -P "${FUZZ_JOBS:-2}" -I{} sh -c \
      "$cc $flags $san -fsanitize=fuzzer-no-link -c {} -o $out/obj/\$(echo {} | tr / _).o"
  rm -f "$lib"
  ar rcs "$lib" "$out"/obj/*.o
  echo $flags $srcs >"$stamp"
fi

targets="codec_decode sparse_delta_decode safetensors_decode"
[ -n "$proto_flags" ] && targets="$targets chunk_assembler bulk_frame"
n=$(echo $targets | wc -w)
# A counted run is the same run every time only without address-space randomization (libFuzzer
# learns from compared values, and some comparisons are of addresses) and without reloading the
# corpus directory, which libFuzzer does by the clock.
fixed=""
if [ -n "$runs" ]; then
  budget_flags="-seed=1 -runs=$runs -reload=0"
  what="$runs inputs from seed 1"
  if setarch "$(uname -m)" -R true >/dev/null 2>&1; then
    fixed="setarch $(uname -m) -R"
  else
    echo "fuzz: setarch -R refused here: addresses are randomized, so the inputs may vary by run"
  fi
else
  per=$((secs / n))
  [ "$per" -lt 1 ] && per=1
  budget_flags="-max_total_time=$per"
  what="${per}s"
fi

libs="$proto_libs -lcrypto -lboost_json -lzstd"
# Builds $2 from $1 unless it is newer than both the source and the library: $1 compiled
# with the instrumentation $3 (through ccache when there is one), linked with $4.
link() {
  if [ ! -f "$2" ] || [ -n "$(find "$1" "$lib" -newer "$2" 2>/dev/null | head -1)" ]; then
    # shellcheck disable=SC2086
    $cc $flags $san $3 -c "$1" -o "$2.o"
    # shellcheck disable=SC2086
    "$cxx" $flags $san $4 "$2.o" "$lib" $libs -o "$2"
  fi
}
link tests/fuzz/make_seeds.cc "$out/make_seeds" "" ""
for t in $targets; do
  link "tests/fuzz/${t}_fuzz.cc" "$out/${t}_fuzz" -fsanitize=fuzzer-no-link -fsanitize=fuzzer
done
if [ -n "$build_only" ]; then
  echo "fuzz: targets built: $targets"
  exit 0
fi
"$out/make_seeds" "$out/corpus"
for t in $targets; do
  seeds="$out/corpus/${t%_decode}"
  # A counted run starts from the seed inputs alone, so that it is the same run every time.
  [ -n "$runs" ] && rm -rf "$out/run/$t"
  mkdir -p "$out/run/$t" "$seeds"
  echo "fuzz: $t, $what"
  # shellcheck disable=SC2086
  $fixed "$out/${t}_fuzz" $budget_flags -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$out/run/$t/" "$out/run/$t" "$seeds" 2>"$out/run/$t.log" || {
    tail -40 "$out/run/$t.log"
    echo "fuzz: $t FAILED (crash input under $out/run/$t/)"
    exit 1
  }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/run/$t.log" | tr '\n' ' '
  echo
done
echo "fuzz: all targets ran clean"
