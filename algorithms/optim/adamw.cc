#include "algorithms/optim/adamw.h"

#include <string>

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

StatusOr<InnerOptimizer> parse_inner_optimizer(std::string_view name) {
  if (name.empty() || name == "adamw") return InnerOptimizer::kAdamW;
  if (name == "muon") return InnerOptimizer::kMuon;
  return InvalidArgument("optimizer must be \"adamw\" or \"muon\", not \"" +
                         std::string(name.substr(0, 64)) + "\"");
}

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
  const auto& views = m_.layout().views();
  const bool muon = cfg_.optimizer == InnerOptimizer::kMuon;
  kernels::cpu::MuonParams mp;
  mp.lr = lr;
  mp.momentum = cfg_.muon_momentum;
  mp.weight_decay = cfg_.weight_decay;
  // Consecutive AdamW views with the same decay rule are updated in one call (fewer, longer
  // passes); a Muon view is a call of its own.
  size_t i = 0;
  while (i < views.size()) {
    if (muon && muon_view(views[i])) {
      const ParamView& w = views[i];
      kernels::cpu::muon_update(params.data() + w.offset, grads.data() + w.offset,
                                m_.data() + w.offset, static_cast<int>(w.shape[0]),
                                static_cast<int>(w.shape[1]), mp, muon_scratch_);
      ++i;
      continue;
    }
    const bool d = decays(views[i]);
    size_t j = i + 1;
    while (j < views.size() && decays(views[j]) == d && !(muon && muon_view(views[j]))) ++j;
    const size_t begin = views[i].offset;
    const size_t end = views[j - 1].offset + views[j - 1].numel();
    hp.weight_decay = d ? cfg_.weight_decay : 0.0;
    kernels::cpu::adamw_update(params.data() + begin, grads.data() + begin, m_.data() + begin,
                               v_.data() + begin, end - begin, hp, step_);
    i = j;
  }
}

bool AdamW::muon_view(const ParamView& v) {
  return v.shape.size() == 2 && v.name.rfind("model.layers.", 0) == 0;
}

void AdamW::reset() {
  m_.zero();
  v_.zero();
  step_ = 0;
}

}  // namespace atl::algorithms
