#include "algorithms/hydra/removed_units.h"

#include <algorithm>
#include <string>

#include "algorithms/model/subnet.h"

namespace atl::algorithms::hydra {

std::vector<ColumnBlock> removed_output_columns(const Subnet& s, const ModelConfig& cfg) {
  const ParamLayout layout = make_layout(cfg);
  // A head unit's output channels: the gD columns of its g query heads.
  const size_t C = size_t(cfg.dim), gD = C / size_t(cfg.heads) * size_t(heads_per_unit(cfg)),
               F = size_t(cfg.ffn_hidden), Fb = F / size_t(s.ffn_blocks);
  std::vector<ColumnBlock> out;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    // Both (out, in) row-major: a unit's input channels are a column block of every row.
    const size_t o = layout.find(prefix + "self_attn.o_proj.weight")->offset;  // (C, C)
    const size_t down = layout.find(prefix + "mlp.down_proj.weight")->offset;  // (C, F)
    for (size_t h = 0; h < s.layers[l].heads.size(); ++h)
      if (!s.layers[l].heads[h]) out.push_back({o + h * gD, C, gD, C});
    for (size_t b = 0; b < s.layers[l].ffn_blocks.size(); ++b)
      if (!s.layers[l].ffn_blocks[b]) out.push_back({down + b * Fb, F, Fb, C});
  }
  return out;
}

void zero_columns(std::span<float> theta, const std::vector<ColumnBlock>& blocks) {
  for (const ColumnBlock& b : blocks)
    for (size_t r = 0; r < b.rows; ++r) {
      float* row = theta.data() + b.offset + r * b.pitch;
      std::fill(row, row + b.width, 0.0f);
    }
}

}  // namespace atl::algorithms::hydra
