#!/usr/bin/env bash
# Builds the binaries of bench/gpu/check.sh on a machine that has the project's build
# dependencies (gRPC, RocksDB, OpenBLAS, GTest, ...) and packs them, with the shared libraries a
# bare CUDA machine lacks, into build-prebuilt/ (ignored by git, like every build*/ folder):
#   build-prebuilt/bin/  test_cuda bench_cuda bench_cuda_model
#   build-prebuilt/lib/  libopenblas, libgfortran, libquadmath, libgomp, libcrypto, libstdc++, ...
#   build-prebuilt/tree.sha256  hash of the sources they were built from (check.sh compares)
# A GPU machine whose image has CUDA 13 but none of the project's other dependencies then runs
# `bench/gpu/check.sh` with build-prebuilt/ copied into the tree: check.sh uses it when its
# hash matches the tree, builds when it can, and falls back to a stale pack (saying so) when it
# cannot. Portable code: -DATOLL_NATIVE=OFF (the GPU machine's CPU is not this one), CUDA for
# sm_80 and sm_90a as always.
# Not packed (they come from the GPU machine): glibc (needs >= this machine's), the CUDA driver,
# and the CUDA toolkit's libraries (cudart, NCCL, and cublasLt, which test_cuda loads at run
# time: check.sh looks for them in /usr/local/cuda and in python3's nvidia-* packages).
# Usage: bench/gpu/pack.sh   (JOBS=n, ATOLL_PACK_BUILD_DIR=dir to override; default -j2)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${ATOLL_PACK_BUILD_DIR:-build-pack}"
DEST=build-prebuilt
JOBS="${JOBS:-2}"
targets=(test_cuda bench_cuda bench_cuda_model)

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATOLL_CUDA=ON -DATOLL_NATIVE=OFF \
  ${ATOLL_CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${targets[@]}"; do cp "$BUILD/$t" "$DEST/bin/"; done
# Every resolved library except glibc's, the dynamic loader and the CUDA driver / toolkit ones.
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) continue ;;
    libcuda.so.* | libcudart.so.* | libcublas*.so.* | libnccl.so.*) continue ;;
  esac
  cp -L "$path" "$DEST/lib/$name"
done
bench/gpu/tree_hash.sh >"$DEST/tree.sha256"
du -sh "$DEST"
ls "$DEST/bin" "$DEST/lib"
echo "pack.sh: copy build-prebuilt/ into the tree on the GPU machine, then run bench/gpu/check.sh"
