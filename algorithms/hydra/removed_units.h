// A subnetwork (algorithms/model/subnet.h) as the full model with some weights zeroed: the
// output weights of its removed units — the o_proj columns of a removed head unit (its query
// heads), the down_proj columns of a removed FFN block. With them zero a removed unit adds
// exactly zero to its residual stream, as when it is not computed (Llama::set_subnet), and no
// gradient reaches its other weights (q/k/v rows and biases), so
// the full model's loss is the subnetwork's and its gradient at the subnetwork's trained elements
// is the subnetwork's. The CUDA model has no unit masks and trains Hydra this way
// (algorithms/cuda/cuda_hydra.h, one strided memset per block on the device).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"

namespace atl::algorithms::hydra {

// A column block of a row-major (rows, pitch) matrix inside the flat θ of make_layout.
struct ColumnBlock {
  size_t offset = 0;  // first element, in θ
  size_t pitch = 0;   // row length (elements)
  size_t width = 0;   // columns (elements)
  size_t rows = 0;
};

// The output-weight blocks of every removed unit of `s` (frozen layers too), layer by layer,
// heads then FFN blocks. `s` must pass validate(s, cfg) for a dense cfg.
std::vector<ColumnBlock> removed_output_columns(const Subnet& s, const ModelConfig& cfg);

// θ[block] ← 0 for every block (the host twin of the device memsets).
void zero_columns(std::span<float> theta, const std::vector<ColumnBlock>& blocks);

}  // namespace atl::algorithms::hydra
