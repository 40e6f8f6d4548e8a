// The MoE layer's forward + backward on the GPU against a dense SwiGLU FFN of equal active FLOPs
// (hidden K·F), for bench_cuda's JSON. Same comparison as the CPU `atoll bench moe`.
#pragma once

#include <string>

#include "kernels/cuda/runtime.h"

namespace atl::bench {

// One JSON object: {"tokens", "C", "E", "K", "F", "dense_hidden", "moe_ms", "dense_ms",
// "moe_vs_dense", ...}. Exits the process with one line on a CUDA error.
std::string bench_moe_layer(kernels::cuda::Context& ctx, bool quick);

}  // namespace atl::bench
