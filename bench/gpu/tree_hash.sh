#!/usr/bin/env bash
# One sha256 over the sources the GPU check's binaries are built from (paths and contents, in a
# fixed order), so bench/gpu/check.sh can tell whether build-prebuilt/ matches the tree. Needs no
# git: the GPU machine gets a copy of the tree without it.
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt kernels algorithms tests/CMakeLists.txt tests/cuda tests/tools \
  bench/CMakeLists.txt bench/gpu -type f \
  \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) |
  LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
