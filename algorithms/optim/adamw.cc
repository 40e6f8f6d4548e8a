#include "algorithms/optim/adamw.h"

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg)
    : cfg_(cfg), m_(layout), v_(layout) {}

void AdamW::step(ParamSet& params, const ParamSet& grads, double lr) {
  ATOLL_CHECK(params.layout() == m_.layout() && grads.layout() == m_.layout(),
              "AdamW::step: layout mismatch");
  ++step_;
  kernels::cpu::AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = cfg_.beta1;
  hp.beta2 = cfg_.beta2;
  hp.eps = cfg_.eps;
  // Consecutive views with the same decay rule are updated in one call (fewer, longer passes).
  const auto& views = m_.layout().views();
  size_t i = 0;
  while (i < views.size()) {
    const bool d = decays(views[i]);
    size_t j = i + 1;
    while (j < views.size() && decays(views[j]) == d) ++j;
    const size_t begin = views[i].offset;
    const size_t end = views[j - 1].offset + views[j - 1].numel();
    hp.weight_decay = d ? cfg_.weight_decay : 0.0;
    kernels::cpu::adamw_update(params.data() + begin, grads.data() + begin, m_.data() + begin,
                               v_.data() + begin, end - begin, hp, step_);
    i = j;
  }
}

void AdamW::reset() {
  m_.zero();
  v_.zero();
  step_ = 0;
}

}  // namespace atl::algorithms
