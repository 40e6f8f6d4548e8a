#include "algorithms/hydra/cost.h"

#include <algorithm>
#include <cmath>

namespace atl::algorithms::hydra {

int64_t CostModel::head_fwd() const {
  const int64_t C = model.dim, D = C / model.heads, g = heads_per_unit(model), T = seq;
  return 2 * (2 * g + 2) * D * C + 4 * g * T * D;
}
int64_t CostModel::block_fwd() const {
  const int64_t C = model.dim, Fb = model.ffn_hidden / ffn_blocks;
  return 6 * Fb * C;
}
int64_t CostModel::lm_fwd() const {
  return 2 * static_cast<int64_t>(model.vocab) * model.dim;
}

int64_t CostModel::unit_cost(bool is_block, bool in_S, bool above_l0) const {
  const int64_t C = model.dim, D = C / model.heads, g = heads_per_unit(model), T = seq;
  const int64_t a = is_block ? block_fwd() : head_fwd();
  if (in_S) return 3 * a;
  if (!above_l0) return a;
  return is_block ? 2 * a : a + 2 * (2 * g + 2) * D * C + 8 * g * T * D;
}

double CostModel::full_flops_per_token() const {
  return flops_per_token(model, seq);
}

int64_t subnet_flops_per_token(const CostModel& cm, const Subnet& s) {
  const int l0 = lowest_trained_layer(s);
  int64_t f = cm.lm_fwd() + (l0 >= 0 ? cm.lm_fwd() : 0);
  for (int l = 0; l < static_cast<int>(s.layers.size()); ++l) {
    const LayerSubnet& x = s.layers[l];
    const bool above = l0 >= 0 && l > l0;
    const int64_t nh = std::count(x.heads.begin(), x.heads.end(), 1);
    const int64_t nb = std::count(x.ffn_blocks.begin(), x.ffn_blocks.end(), 1);
    f += nh * cm.unit_cost(false, x.train, above) + nb * cm.unit_cost(true, x.train, above);
  }
  return f;
}

double cost_fraction(const CostModel& cm, const Subnet& s) {
  return static_cast<double>(subnet_flops_per_token(cm, s)) / cm.full_flops_per_token();
}

int64_t budget_flops_per_token(const CostModel& cm, double budget) {
  return static_cast<int64_t>(std::floor(budget * cm.full_flops_per_token()));
}

double forward_share(const CostModel& cm, const Subnet& s) {
  const int64_t layer_fwd = head_units(cm.model) * cm.head_fwd() + cm.ffn_blocks * cm.block_fwd();
  const int64_t full = cm.model.layers * layer_fwd + cm.lm_fwd();
  int64_t kept = cm.lm_fwd();
  for (const LayerSubnet& x : s.layers) {
    const int64_t nh = std::count(x.heads.begin(), x.heads.end(), 1);
    const int64_t nb = std::count(x.ffn_blocks.begin(), x.ffn_blocks.end(), 1);
    kept += nh * cm.head_fwd() + nb * cm.block_fwd();
  }
  return static_cast<double>(kept) / static_cast<double>(full);
}

double state_memory_fraction(const CostModel& cm, const Subnet& s) {
  const double P = static_cast<double>(count_params(cm.model));
  const double trained = static_cast<double>(trainable_indices(s, cm.model).size());
  return (4.0 * P + 12.0 * trained) / (16.0 * P);
}

}  // namespace atl::algorithms::hydra
