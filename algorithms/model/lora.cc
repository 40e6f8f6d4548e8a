#include "algorithms/model/lora.h"

#include <algorithm>
#include <cmath>

#include "algorithms/model/llama.h"
#include "kernels/core/check.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

namespace ops = atl::kernels::cpu;

namespace {

constexpr int kNumTargets = sizeof(kLoraTargetNames) / sizeof(kLoraTargetNames[0]);

int target_index(const std::string& t) {
  for (int i = 0; i < kNumTargets; ++i)
    if (t == kLoraTargetNames[i]) return i;
  return -1;
}

std::string module_path(int l, const std::string& target) {
  const bool attn = target == "q" || target == "k" || target == "v" || target == "o";
  return "model.layers." + std::to_string(l) + (attn ? ".self_attn." : ".mlp.") +
         lora_module_name(target);
}

}  // namespace

double lora_scale(const LoraConfig& c) {
  return c.rank > 0 ? c.alpha / c.rank : 0.0;
}

std::string lora_module_name(const std::string& target) {
  return target + "_proj";
}

StatusOr<std::vector<std::string>> parse_lora_targets(const std::string& csv) {
  std::vector<bool> seen(kNumTargets, false);
  size_t start = 0;
  while (start <= csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    std::string name = csv.substr(start, end - start);
    if (name.ends_with("_proj")) name.resize(name.size() - 5);  // PEFT spells them q_proj, ...
    const int i = target_index(name);
    if (i < 0)
      return InvalidArgument("LoRA target '" + name +
                             "' is not one of q, k, v, o, gate, up, down (comma-separated)");
    if (seen[i]) return InvalidArgument("LoRA target '" + name + "' is listed twice");
    seen[i] = true;
    start = end + 1;
  }
  std::vector<std::string> out;
  for (int i = 0; i < kNumTargets; ++i)
    if (seen[i]) out.push_back(kLoraTargetNames[i]);
  return out;
}

std::string lora_targets_csv(const LoraConfig& c) {
  std::string s;
  for (const auto& t : c.targets) s += (s.empty() ? "" : ",") + t;
  return s;
}

Status validate(const LoraConfig& lora, const ModelConfig& model) {
  if (lora.rank < 1 || lora.rank > 4096)
    return InvalidArgument("LoRA rank must be in [1, 4096], got " + std::to_string(lora.rank));
  if (!(lora.alpha > 0.0) || !std::isfinite(lora.alpha))
    return InvalidArgument("LoRA alpha must be a finite number > 0, got " +
                           std::to_string(lora.alpha));
  if (lora.targets.empty())
    return InvalidArgument(
        "LoRA needs at least one target projection (q, k, v, o, gate, up, down)");
  int last = -1;
  for (const auto& t : lora.targets) {
    const int i = target_index(t);
    if (i < 0)
      return InvalidArgument("LoRA target '" + t + "' is not one of q, k, v, o, gate, up, down");
    if (i <= last)
      return InvalidArgument(
          "LoRA targets must be distinct, in the order q, k, v, o, gate, up, down");
    last = i;
  }
  if (model.moe_experts > 0)
    return InvalidArgument("LoRA adapters are not supported on MoE models yet (moe_experts = " +
                           std::to_string(model.moe_experts) + "); use a dense base");
  return Status::Ok();
}

std::vector<LoraAdapterInfo> lora_adapters(const LoraConfig& lora, const ModelConfig& m) {
  const int C = m.dim, F = m.ffn_hidden, Ckv = m.dim / m.heads * num_kv_heads(m);
  std::vector<LoraAdapterInfo> out;
  for (int l = 0; l < m.layers; ++l) {
    for (const auto& t : lora.targets) {
      // {layer, target, site, in, out, first column of the fused GEMM's output}
      LoraAdapterInfo a;
      if (t == "q") a = {l, t, 0, C, C, 0, "", ""};
      if (t == "k") a = {l, t, 0, C, Ckv, C, "", ""};
      if (t == "v") a = {l, t, 0, C, Ckv, C + Ckv, "", ""};
      if (t == "o") a = {l, t, 1, C, C, 0, "", ""};
      if (t == "gate") a = {l, t, 2, C, F, 0, "", ""};
      if (t == "up") a = {l, t, 2, C, F, F, "", ""};
      if (t == "down") a = {l, t, 3, F, C, 0, "", ""};
      a.a_name = module_path(l, t) + ".lora_A.weight";
      a.b_name = module_path(l, t) + ".lora_B.weight";
      out.push_back(a);
    }
  }
  return out;
}

ParamLayout make_lora_layout(const LoraConfig& lora, const ModelConfig& model) {
  ParamLayout L;
  const int64_t r = lora.rank;
  for (const auto& a : lora_adapters(lora, model)) {
    L.add(a.a_name, {r, a.in});
    L.add(a.b_name, {a.out, r});
  }
  return L;
}

int64_t count_lora_params(const LoraConfig& lora, const ModelConfig& model) {
  return static_cast<int64_t>(make_lora_layout(lora, model).numel());
}

void init_lora_params(ParamSet& adapters, const LoraConfig& lora, const ModelConfig& model,
                      uint64_t seed) {
  if (!(adapters.layout() == make_lora_layout(lora, model)))
    internal_error("init_lora_params: layout does not match the LoRA config");
  const auto& views = adapters.layout().views();
  for (size_t i = 0; i < views.size(); ++i) {
    const ParamView& v = views[i];
    float* p = adapters.data() + v.offset;
    const size_t n = v.numel();
    if (v.name.ends_with(".lora_B.weight")) {
      std::fill(p, p + n, 0.0f);
      continue;
    }
    // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain·sqrt(3 / fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(v.shape[1]));
    const Philox rng(seed, static_cast<uint64_t>(i) + 1);
    for (size_t j = 0; j < n; ++j)
      p[j] = static_cast<float>((2.0 * rng.uniform_double(j) - 1.0) * bound);
  }
}

StatusOr<ParamSet> merge_lora(const ParamSet& base, const ParamSet& adapters,
                              const LoraConfig& lora, const ModelConfig& model) {
  ATOLL_RETURN_IF_ERROR(validate(lora, model));
  if (!(base.layout() == make_layout(model)))
    return InvalidArgument("merge_lora: the base parameters do not match the model config");
  if (!(adapters.layout() == make_lora_layout(lora, model)))
    return InvalidArgument("merge_lora: the adapters do not match the LoRA config");
  ParamSet out = base;
  const double scale = lora_scale(lora);
  const int r = lora.rank;
  for (const auto& a : lora_adapters(lora, model)) {
    const std::string w_name = a.a_name.substr(0, a.a_name.size() - 14) + ".weight";
    const ParamView* w = out.layout().find(w_name);
    if (!w) return Internal("merge_lora: no base tensor " + w_name);
    const float* A = adapters.data() + adapters.layout().find(a.a_name)->offset;  // (r, in)
    const float* B = adapters.data() + adapters.layout().find(a.b_name)->offset;  // (out, r)
    float* W = out.data() + w->offset;                                            // (out, in)
    for (int o = 0; o < a.out; ++o)
      for (int i = 0; i < a.in; ++i) {
        double s = 0.0;
        for (int k = 0; k < r; ++k) s += double(B[size_t(o) * r + k]) * A[size_t(k) * a.in + i];
        W[size_t(o) * a.in + i] = static_cast<float>(W[size_t(o) * a.in + i] + scale * s);
      }
  }
  return out;
}

// ---- LoraAdapters ------------------------------------------------------------------------------

LoraAdapters::LoraAdapters(const LoraConfig& lora, const ModelConfig& model,
                           std::shared_ptr<const FrozenBase> base)
    : lora_(lora),
      scale_(static_cast<float>(lora_scale(lora))),
      layout_(make_lora_layout(lora, model)),
      base_(std::move(base)) {
  Status st = validate(lora, model);
  if (!st.ok()) internal_error("LoraAdapters: " + st.message());
  if (!base_ || !(base_->layout() == make_layout(model)))
    internal_error("LoraAdapters: the base parameters do not match the model config");
  by_site_.resize(static_cast<size_t>(model.layers) * 4);
  for (const auto& a : lora_adapters(lora, model)) {
    by_site_[size_t(a.layer) * 4 + a.site].push_back(static_cast<int>(slots_.size()));
    slots_.push_back({a, layout_.find(a.a_name)->offset, layout_.find(a.b_name)->offset});
  }
}

void LoraAdapters::ensure_rows(size_t N) {
  int max_out = 0;
  for (const auto& s : slots_) max_out = std::max(max_out, s.info.out);
  const size_t r = lora_.rank;
  if (u_.size() < slots_.size() * N * r) u_.resize(slots_.size() * N * r);
  if (tmp_.size() < N * max_out) tmp_.resize(N * max_out);
  if (du_.size() < N * r) du_.resize(N * r);
  rows_ = N;
}

void LoraAdapters::forward(int l, int site, const float* adapters, const float* x, float* out,
                           int N, int width) {
  const int r = lora_.rank;
  for (int idx : by_site_[size_t(l) * 4 + site]) {
    const Slot& s = slots_[idx];
    float* u = u_.data() + size_t(idx) * N * r;
    // u (N, r) = x (N, in) · Aᵀ ; tmp (N, out) = u · Bᵀ ; out[:, column ..] += scale · tmp
    ops::matmul_forward(u, x, adapters + s.off_a, N, s.info.in, r);
    ops::matmul_forward(tmp_.data(), u, adapters + s.off_b, N, r, s.info.out);
    const int cols = s.info.out, c0 = s.info.column;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* o = out + size_t(n) * width + c0;
      const float* t = tmp_.data() + size_t(n) * cols;
      for (int c = 0; c < cols; ++c) o[c] += scale_ * t[c];
    }
  }
}

void LoraAdapters::backward(int l, int site, const float* adapters, float* grads, const float* x,
                            const float* dout, float* dx, int N, int width) {
  const int r = lora_.rank;
  for (int idx : by_site_[size_t(l) * 4 + site]) {
    const Slot& s = slots_[idx];
    const float* u = u_.data() + size_t(idx) * N * r;
    const int cols = s.info.out, c0 = s.info.column;
    // dtmp (N, out) = scale · dout[:, column ..]
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* d = dout + size_t(n) * width + c0;
      float* t = tmp_.data() + size_t(n) * cols;
      for (int c = 0; c < cols; ++c) t[c] = scale_ * d[c];
    }
    // du (N, r) = dtmp · B ; dB (out, r) += dtmpᵀ · u
    ops::zero_fill(du_.data(), size_t(N) * r);
    ops::matmul_backward(du_.data(), grads + s.off_b, tmp_.data(), u, adapters + s.off_b, N, r,
                         cols);
    // dx (N, in) += du · A ; dA (r, in) += duᵀ · x
    ops::matmul_backward(dx, grads + s.off_a, du_.data(), x, adapters + s.off_a, N, s.info.in, r);
  }
}

}  // namespace atl::algorithms
