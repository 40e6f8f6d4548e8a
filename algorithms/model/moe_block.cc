#include "algorithms/model/moe_block.h"

#include "algorithms/model/llama.h"
#include "kernels/cpu/moe_ops.h"

namespace atl::algorithms {

namespace ops = atl::kernels::cpu;

namespace {

// The expert GEMMs of moe_ffn_forward/backward through a PrecisionGemm (`which`: 0 gate|up,
// 1 down).
class RecipeGemms final : public ops::MoeExpertGemms<float> {
 public:
  RecipeGemms(PrecisionGemm& g, const MoeSites& s) : g_(g), s_(s) {}
  void dense_forward(float* out, const float* x, const float* w, int N, int IC, int OC,
                     int which) override {
    g_.forward(out, x, w, N, IC, OC, which == 0 ? s_.shared_gu : s_.shared_down);
  }
  void dense_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                      int IC, int OC, int which) override {
    g_.backward(dx, dw, dy, x, w, N, IC, OC, which == 0 ? s_.shared_gu : s_.shared_down);
  }
  void grouped_forward(float* out, const float* x, const float* w, size_t w_stride,
                       const ops::MoePlan& plan, int IC, int OC, int which) override {
    g_.grouped_forward(out, x, w, w_stride, plan, IC, OC, which == 0 ? s_.gu : s_.down);
  }
  void grouped_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        size_t w_stride, const ops::MoePlan& plan, int IC, int OC,
                        int which) override {
    g_.grouped_backward(dx, dw, dy, x, w, w_stride, plan, IC, OC, which == 0 ? s_.gu : s_.down);
  }

 private:
  PrecisionGemm& g_;
  MoeSites s_;
};

}  // namespace

struct MoeBlocks::Impl {
  ops::MoeFfnShape shape;
  double aux_coef = 0, z_coef = 0;
  std::vector<ops::MoeFfnWork<float>> work;  // one per MoE layer
};

MoeBlocks::MoeBlocks(const ModelConfig& cfg, const ParamLayout& layout)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shape.C = cfg.dim;
  m.shape.E = cfg.moe_experts;
  m.shape.K = cfg.moe_top_k;
  m.shape.F = cfg.moe_hidden;
  m.shape.Fs = cfg.moe_shared_hidden;
  m.shape.score = cfg.moe_score == "sigmoid" ? ops::MoeScore::kSigmoid : ops::MoeScore::kSoftmax;
  m.shape.renormalize = true;
  m.aux_coef = cfg.moe_aux_coef;
  m.z_coef = cfg.moe_z_coef;
  index_.assign(cfg.layers, -1);
  for (int l = 0; l < cfg.layers; ++l) {
    if (!is_moe_layer(cfg, l)) continue;
    auto at = [&](const std::string& s) {
      const ParamView* v = layout.find(moe_param_name(l, s));
      return v ? v->offset : size_t(0);
    };
    index_[l] = static_cast<int>(off_.size());
    // Experts are adjacent in the layout (expert e's gate|up|down block at e·3·F·C).
    off_.push_back({at("gate.weight"), at("experts.0.gate_proj.weight"),
                    at("shared_expert.gate_proj.weight"), at("shared_expert.down_proj.weight")});
  }
  m.work.resize(off_.size());
}

MoeBlocks::~MoeBlocks() = default;

void MoeBlocks::forward(int layer, const float* P, const float* x, float* out, int N,
                        PrecisionGemm& gemm, const MoeSites& sites) {
  const Offsets& o = off_[index_[layer]];
  const bool sh = impl_->shape.Fs > 0;
  RecipeGemms g(gemm, sites);
  ops::moe_ffn_forward(impl_->work[index_[layer]], out, x, P + o.router, P + o.experts,
                       sh ? P + o.shared_gu : nullptr, sh ? P + o.shared_down : nullptr, N,
                       impl_->shape, gemm.active() ? &g : nullptr);
}

void MoeBlocks::backward(int layer, const float* P, float* G, const float* x, const float* dout,
                         float* dx, PrecisionGemm& gemm, const MoeSites& sites) {
  const Offsets& o = off_[index_[layer]];
  const bool sh = impl_->shape.Fs > 0;
  RecipeGemms g(gemm, sites);
  ops::moe_ffn_backward(impl_->work[index_[layer]], dx, G + o.router, G + o.experts,
                        sh ? G + o.shared_gu : nullptr, sh ? G + o.shared_down : nullptr, dout, x,
                        P + o.router, P + o.experts, sh ? P + o.shared_gu : nullptr,
                        sh ? P + o.shared_down : nullptr, impl_->shape, impl_->aux_coef,
                        impl_->z_coef, gemm.active() ? &g : nullptr);
}

double MoeBlocks::aux_loss_sum() const {
  double s = 0;
  for (const auto& w : impl_->work) s += w.aux_loss;
  return s;
}

double MoeBlocks::z_loss_sum() const {
  double s = 0;
  for (const auto& w : impl_->work) s += w.z_loss;
  return s;
}

double MoeBlocks::weighted_loss() const {
  return impl_->aux_coef * aux_loss_sum() + impl_->z_coef * z_loss_sum();
}

MoeSites moe_gemm_sites(int layers, Precision precision, int l) {
  MoeSites s{gemm_site(layers, precision, l, 2), gemm_site(layers, precision, l, 3),
             gemm_site(layers, precision, l, 2), gemm_site(layers, precision, l, 3)};
  s.shared_gu.id = (1u << 19) + static_cast<uint32_t>(l) * 2;
  s.shared_down.id = s.shared_gu.id + 1;
  return s;
}

}  // namespace atl::algorithms
