#include "algorithms/optim/masked_adamw.h"

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

MaskedAdamW::MaskedAdamW(const ParamLayout& layout, std::vector<uint32_t> indices,
                         const AdamWConfig& cfg)
    : cfg_(cfg) {
  // Split into decaying and non-decaying elements (views are in offset order, indices ascend).
  std::vector<uint32_t> nodecay;
  const auto& views = layout.views();
  size_t vi = 0;
  for (uint32_t i : indices) {
    while (vi < views.size() && views[vi].offset + views[vi].numel() <= i) ++vi;
    ATOLL_CHECK(vi < views.size(), "MaskedAdamW: index " + std::to_string(i) + " out of range");
    (AdamW::decays(views[vi]) ? idx_ : nodecay).push_back(i);
  }
  n_decay_ = idx_.size();
  idx_.insert(idx_.end(), nodecay.begin(), nodecay.end());
  m_.assign(idx_.size(), 0.0f);
  v_.assign(idx_.size(), 0.0f);
  p_.resize(idx_.size());
  g_.resize(idx_.size());
}

Status MaskedAdamW::set_moments(int64_t steps, std::vector<float> m, std::vector<float> v) {
  if (m.size() != idx_.size() || v.size() != idx_.size() || steps < 0)
    return InvalidArgument("masked AdamW state of " + std::to_string(m.size()) + "/" +
                           std::to_string(v.size()) + " moments for " +
                           std::to_string(idx_.size()) + " held elements");
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = steps;
  return Status::Ok();
}

void MaskedAdamW::step(ParamSet& params, const ParamSet& grads, double lr) {
  ++step_;
  const size_t n = idx_.size();
  for (size_t j = 0; j < n; ++j) {
    p_[j] = params.data()[idx_[j]];
    g_[j] = grads.data()[idx_[j]];
  }
  kernels::cpu::AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = cfg_.beta1;
  hp.beta2 = cfg_.beta2;
  hp.eps = cfg_.eps;
  hp.weight_decay = cfg_.weight_decay;
  if (n_decay_)
    kernels::cpu::adamw_update(p_.data(), g_.data(), m_.data(), v_.data(), n_decay_, hp, step_);
  hp.weight_decay = 0.0;
  if (n > n_decay_)
    kernels::cpu::adamw_update(p_.data() + n_decay_, g_.data() + n_decay_, m_.data() + n_decay_,
                               v_.data() + n_decay_, n - n_decay_, hp, step_);
  for (size_t j = 0; j < n; ++j) params.data()[idx_[j]] = p_[j];
}

}  // namespace atl::algorithms
