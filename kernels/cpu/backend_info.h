// What decides the CPU backend's bits besides Atoll's code and config.
#pragma once

#include <string>

#include "kernels/core/status.h"

namespace atl::kernels::cpu {

// The CPU, the kernels OpenBLAS picked for it at start-up, and the vector instructions this
// build was compiled for (-march=native by default). Two hosts give the same bits for the same
// config and seed only when these agree; `atoll --version` prints it, e.g. "cpu Intel(R)
// Xeon(R) Processor; OpenBLAS kernels SkylakeX; compiled for AVX-512".
std::string backend_description();

// The value of the first /proc/cpuinfo line whose name starts with `key` ("model name",
// "flags"), without the leading blanks; "" when there is none (or no /proc).
std::string cpuinfo_field(const std::string& key);

// OpenBLAS 0.3.21 (Debian 12's) falls back to its generic `Prescott` kernels on an x86-64 CPU
// newer than it knows (e.g. Intel family 6, model 207), which makes a training step 2.7x slower
// (bench/RESULTS.md, "OpenBLAS kernels on a CPU it does not know"). Later OpenBLAS releases
// pick by the CPU's features instead; this does the same. OpenBLAS reads OPENBLAS_CORETYPE once,
// when the library loads, so when it fell back and the variable is unset, this sets it to the
// kernels the features allow (Cooperlake with AVX-512 BF16, SkylakeX with AVX-512, Haswell with
// AVX2 and FMA, SandyBridge with AVX) and re-executes the process (/proc/self/exe, same argv
// and pid); it returns only when nothing is to change or the exec failed (then with one line on
// stderr, and the process goes on with the generic kernels). Call it first in main(), before
// any thread is started. A user's own OPENBLAS_CORETYPE is always kept.
void use_feature_blas_kernels(char** argv);

// OpenBLAS maps a buffer of kOpenBlasBufferBytes for each of its threads; under an address-space
// limit (ulimit -v, RLIMIT_AS) those buffers do not fit in, it retries the allocation for ever
// and the process spins without a word. When such a limit is set and OPENBLAS_NUM_THREADS is not,
// this caps OpenBLAS's threads to the buffers that fit beside what the process maps now plus
// kAddressReserveBytes, and re-executes the process as use_feature_blas_kernels does (one line on
// stderr says so); FailedPrecondition, naming the limit to set, when not even one fits. Call it
// right after use_feature_blas_kernels.
inline constexpr size_t kOpenBlasBufferBytes = size_t{128} << 20;
inline constexpr size_t kAddressReserveBytes = size_t{256} << 20;
Status fit_blas_threads_to_address_limit(char** argv);

// The kernel set use_feature_blas_kernels would ask OpenBLAS for on a CPU whose /proc/cpuinfo
// "flags" line is `flags` (space-separated), or "" when it has none of them (no AVX).
std::string feature_blas_kernels(const std::string& flags);

}  // namespace atl::kernels::cpu
