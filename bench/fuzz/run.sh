#!/bin/sh
# The long decoder fuzz run: tests/fuzz/run.sh for SECONDS in all (default 600), split over
# the targets, each starting from the corpus its earlier long runs left under
# build/fuzz/run/<target>/ (so coverage accumulates from run to run), time-bounded and
# randomly seeded. `make test` runs the short, counted version (20000 inputs per target from
# seed 1, tests/CMakeLists.txt: fuzz_decoders).
#
#   bench/fuzz/run.sh [SECONDS]        (from anywhere; BUILD_DIR defaults to build)
#
# Exits non-zero on a crash, leak or sanitizer report, naming the input under
# build/fuzz/run/<target>/; 77 when clang or its libFuzzer runtime is missing.
set -eu
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
secs=${1:-600}
case "$secs" in
  ''|*[!0-9]*) echo "bench/fuzz: bad SECONDS '$secs': give a whole number of seconds" >&2; exit 2 ;;
esac
if [ ! -f "$build/gen/transport/proto/atoll.pb.cc" ]; then
  echo "bench/fuzz: $build/gen/transport/proto/atoll.pb.cc not found; build first (make build)" >&2
  exit 1
fi
FUZZ_OUT="$build/fuzz" FUZZ_PROTO_GEN="$build/gen" exec sh tests/fuzz/run.sh "$secs"
