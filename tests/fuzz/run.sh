#!/bin/sh
# Builds the decoder fuzz targets with clang's libFuzzer + ASan/UBSan and runs each for a
# bounded time, seeded with valid inputs (tests/fuzz/make_seeds.cc):
#   codec_decode, sparse_delta_decode, safetensors_decode, and chunk_assembler when the
#   generated protobuf code is available (FUZZ_PROTO_GEN=<build>/gen; CTest sets it).
# Usage: tests/fuzz/run.sh [total seconds, default 60]   (from the repository root)
# Exits 77 (CTest's "skipped") when clang++ or its libFuzzer runtime is missing. Objects are
# reused across runs until a source or header under algorithms/, kernels/, transport/ or
# tests/fuzz/ changes.
set -eu
secs=${1:-60}
out=${FUZZ_OUT:-build/fuzz}
cxx=${FUZZ_CXX:-clang++}
gen=${FUZZ_PROTO_GEN:-}
mkdir -p "$out"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: $cxx not found (install clang to run the decoder fuzz targets)"
  exit 77
fi
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$out/probe.cc"
if ! "$cxx" -fsanitize=fuzzer "$out/probe.cc" -o "$out/probe" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: $cxx cannot link -fsanitize=fuzzer (libFuzzer runtime missing)"
  exit 77
fi

proto_flags=""
proto_libs=""
proto_srcs=""
if [ -n "$gen" ] && [ -f "$gen/transport/proto/atoll.pb.cc" ]; then
  proto_flags="-DATL_FUZZ_PROTO -I$gen"
  proto_libs="-lprotobuf"
  proto_srcs="$gen/transport/proto/atoll.pb.cc transport/tensor_stream.cc kernels/core/sha256.cc"
else
  echo "fuzz: chunk_assembler target skipped (set FUZZ_PROTO_GEN to the build's gen/ directory)"
fi

san="-fsanitize=address,undefined -fno-sanitize-recover=all"
flags="-std=c++20 -O1 -g -I. $proto_flags"
srcs="algorithms/compress/*.cc kernels/formats/*.cc kernels/core/philox.cc kernels/core/status.cc
      kernels/core/check.cc kernels/core/crc32c.cc algorithms/model/safetensors.cc
      algorithms/model/param_set.cc"
lib="$out/libfuzzdeps.a"
stamp="$out/libfuzzdeps.flags"
if [ ! -f "$lib" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$flags" ] ||
   [ -n "$(find algorithms kernels transport tests/fuzz $gen -newer "$lib" \( -name '*.cc' -o -name '*.h' \) 2>/dev/null | head -1)" ]; then
  echo "fuzz: compiling the decoders with $cxx (ASan, UBSan)"
  rm -rf "$out/obj" && mkdir -p "$out/obj"
  # shellcheck disable=SC2086
  for s in $srcs $proto_srcs; do echo "$s"; done |
    xargs -P "${FUZZ_JOBS:-2}" -I{} sh -c \
      "$cxx $flags $san -fsanitize=fuzzer-no-link -c {} -o $out/obj/\$(echo {} | tr / _).o"
  rm -f "$lib"
  ar rcs "$lib" "$out"/obj/*.o
  echo "$flags" >"$stamp"
fi

targets="codec_decode sparse_delta_decode safetensors_decode"
[ -n "$proto_flags" ] && targets="$targets chunk_assembler"
n=$(echo $targets | wc -w)
per=$((secs / n))
[ "$per" -lt 1 ] && per=1

libs="$proto_libs -lcrypto -lboost_json"
# Links $2 from $1 unless it is newer than both the source and the library.
link() {
  if [ ! -f "$2" ] || [ -n "$(find "$1" "$lib" -newer "$2" 2>/dev/null | head -1)" ]; then
    # shellcheck disable=SC2086
    "$cxx" $flags $san $3 "$1" "$lib" $libs -o "$2"
  fi
}
link tests/fuzz/make_seeds.cc "$out/make_seeds" ""
"$out/make_seeds" "$out/corpus"
for t in $targets; do
  link "tests/fuzz/${t}_fuzz.cc" "$out/${t}_fuzz" -fsanitize=fuzzer
  seeds="$out/corpus/${t%_decode}"
  mkdir -p "$out/run/$t" "$seeds"
  echo "fuzz: $t for ${per}s"
  "$out/${t}_fuzz" -max_total_time="$per" -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$out/run/$t/" "$out/run/$t" "$seeds" 2>"$out/run/$t.log" || {
    tail -40 "$out/run/$t.log"
    echo "fuzz: $t FAILED (crash input under $out/run/$t/)"
    exit 1
  }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/run/$t.log" | tr '\n' ' '
  echo
done
echo "fuzz: all targets ran clean"
