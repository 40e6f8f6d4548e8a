#!/bin/sh
# Builds the codec decoder fuzz target with clang's libFuzzer + ASan/UBSan and runs it for a
# bounded time (default 60 s), seeded with valid messages of every codec.
# Usage: tests/fuzz/run.sh [seconds]   (from the repository root)
set -eu
secs=${1:-60}
out=${FUZZ_OUT:-build/fuzz}
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  tests/fuzz/codec_decode_fuzz.cc algorithms/compress/*.cc kernels/formats/*.cc \
  kernels/core/philox.cc kernels/core/status.cc kernels/core/crc32c.cc -o "$out/codec_decode_fuzz"
clang++ -std=c++20 -O1 -I. tests/fuzz/make_seeds.cc algorithms/compress/*.cc \
  kernels/formats/*.cc kernels/core/philox.cc kernels/core/status.cc kernels/core/crc32c.cc -o "$out/make_seeds"
"$out/make_seeds" "$out/corpus"
"$out/codec_decode_fuzz" -max_total_time="$secs" -max_len=4096 "$out/corpus"
