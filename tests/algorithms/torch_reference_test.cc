// The whole model against PyTorch (Debian's python3-torch): same weights and batch, exchanged as
// safetensors files, must give the same logits, loss and every parameter's gradient, and 10
// AdamW steps (through InnerTrainer: clipping, schedule, AdamW) must track PyTorch's losses.
// The PyTorch side is tests/tools/torch_llama.py.
//
// Relative error of a tensor a against the reference b:  max_i |a_i - b_i| / max(max_i |b_i|, tiny)
// i.e. the largest absolute error scaled by the tensor's largest magnitude (an elementwise ratio
// would blow up on entries that are ~0 in both).
#include "tests/tools/torch_reference.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "algorithms/model/llama.h"
#include "algorithms/model/safetensors.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"

namespace atl::algorithms {
namespace {

namespace fs = std::filesystem;
using atl::testing::rel_err;
using atl::testing::run_torch_llama;
using atl::testing::torch_llama_command;
using atl::testing::torch_unavailable_reason;

bool write_file(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(f);
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Runs the comparison for model c (see the file comment); the MoE router losses (0 for a dense
// model) are compared beside the cross-entropy and are part of the differentiated loss.
void compare_with_torch(const ModelConfig& c) {
  if (const std::string why = torch_unavailable_reason(); !why.empty()) FAIL() << why;

  const int B = 2, T = 32;
  const int kSteps = 10;
  TrainerConfig tc;
  tc.batch = B;
  tc.seq = T;
  tc.lr = 1e-3;
  tc.min_lr = 1e-3;  // constant learning rate: PyTorch's side has no schedule
  tc.warmup = 0;
  tc.total_steps = kSteps;
  tc.weight_decay = 0.1;
  tc.grad_clip = 1.0;  // active: the gradient norm at init is above 1

  ParamSet p(make_layout(c));
  init_params(p, c, 2024);
  // Norm gains away from 1, so their gradients and their effect on the forward are exercised.
  Philox rng(99, 1);
  uint64_t k = 0;
  // q/k/v biases (zero at init) get small random values likewise.
  for (const auto& v : p.layout().views())
    if (v.shape.size() == 1)
      for (size_t i = 0; i < v.numel(); ++i)
        p.data()[v.offset + i] =
            static_cast<float>((v.name.ends_with(".bias") ? 0.0 : 1.0) + 0.2 * rng.normal(k++));

  std::vector<int32_t> inputs(B * T), targets(B * T), rows(B * (T + 1));
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = static_cast<int32_t>(rng.below(1000 + i, c.vocab));
    targets[i] = (i % 7 == 3) ? -1 : static_cast<int32_t>(rng.below(5000 + i, c.vocab));
  }
  for (int i = 0; i < B * (T + 1); ++i)
    rows[i] = static_cast<int32_t>(rng.below(9000 + i, c.vocab));

  Safetensors in;
  append_params(in, p);
  in.tensors.push_back(make_tensor("batch.inputs", {B, T}, inputs.data()));
  in.tensors.push_back(make_tensor("batch.targets", {B, T}, targets.data()));
  in.tensors.push_back(make_tensor("train.rows", {B, T + 1}, rows.data()));
  in.metadata = atl::testing::torch_reference_metadata(c, tc, kSteps);
  if (c.moe_experts > 0) {
    in.metadata["moe_experts"] = std::to_string(c.moe_experts);
    in.metadata["moe_top_k"] = std::to_string(c.moe_top_k);
    in.metadata["moe_hidden"] = std::to_string(c.moe_hidden);
    in.metadata["moe_every"] = std::to_string(c.moe_every);
    in.metadata["moe_score"] = c.moe_score;
    in.metadata["moe_shared_hidden"] = std::to_string(c.moe_shared_hidden);
    in.metadata["moe_aux_coef"] = atl::testing::exact_decimal(c.moe_aux_coef);
    in.metadata["moe_z_coef"] = atl::testing::exact_decimal(c.moe_z_coef);
  }

  atl::testing::ReferenceTempDir dir;
  ASSERT_FALSE(dir.path.empty()) << "cannot create a temp dir";
  const fs::path in_path = dir.path / "in.safetensors", out_path = dir.path / "out.safetensors";
  auto enc = encode_safetensors(in);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  ASSERT_TRUE(write_file(in_path, *enc));
  const std::vector<std::string> args = {in_path.string(), out_path.string()};
  ASSERT_EQ(run_torch_llama(args), 0) << "failed: " << torch_llama_command(args);
  const std::vector<uint8_t> out_bytes = read_file(out_path);
  auto ref = decode_safetensors(out_bytes.data(), out_bytes.size());
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto get = [&](const std::string& name) -> const StTensor& {
    const StTensor* t = ref->find(name);
    if (!t) {
      ADD_FAILURE() << "PyTorch output lacks " << name;
      std::abort();
    }
    return *t;
  };

  // ---- forward + backward on (inputs, targets)
  Llama model(c);
  ParamSet grads(model.layout());
  const float loss = model.forward(p, inputs.data(), targets.data(), B, T);
  const std::vector<float> ref_logits = get("logits").to_f32();
  ASSERT_EQ(ref_logits.size(), size_t(B) * T * c.vocab);
  const double logits_err = rel_err(model.logits(), ref_logits.data(), ref_logits.size());
  model.backward(p, grads);
  const float ref_loss = get("loss").to_f32()[0];
  const double ref_loss64 = get("loss_f64").to_f64()[0];
  std::printf("  loss  C++ %.8f  torch f32 %.8f  torch f64 %.10f\n", loss, ref_loss, ref_loss64);
  std::printf("  logits rel err %.3g\n", logits_err);
  EXPECT_LT(logits_err, 1e-5);
  EXPECT_LT(std::fabs(double(loss) - ref_loss) / std::fabs(ref_loss), 1e-5);
  const double ref_aux = get("aux").to_f32()[0], ref_aux64 = get("aux_f64").to_f64()[0];
  std::printf("  router losses  C++ %.8f  torch f32 %.8f  torch f64 %.10f\n", model.aux_loss(),
              ref_aux, ref_aux64);
  if (c.moe_experts > 0) {
    EXPECT_GT(ref_aux64, 0.0);
    EXPECT_LT(std::fabs(model.aux_loss() - ref_aux64) / ref_aux64, 1e-5);
  } else {
    EXPECT_EQ(model.aux_loss(), 0.0);
    EXPECT_EQ(ref_aux, 0.0);
  }

  double worst = 0, worst64 = 0, torch32_vs_64 = 0;
  std::string worst_name;
  for (const auto& v : p.layout().views()) {
    const std::vector<float> g = get("grad." + v.name).to_f32();
    const std::vector<double> g64 = get("grad_f64." + v.name).to_f64();
    ASSERT_EQ(g.size(), v.numel()) << v.name;
    const float* mine = grads.data() + v.offset;
    const double e = rel_err(mine, g.data(), g.size());
    EXPECT_LT(e, 1e-4) << "gradient of " << v.name;
    if (e > worst) worst = e, worst_name = v.name;
    worst64 = std::max(worst64, rel_err(mine, g64.data(), g.size()));
    torch32_vs_64 = std::max(torch32_vs_64, rel_err(g.data(), g64.data(), g.size()));
  }
  std::printf(
      "  gradients: worst rel err vs torch f32 %.3g (%s); vs torch f64 %.3g "
      "(torch f32 vs f64: %.3g)\n",
      worst, worst_name.c_str(), worst64, torch32_vs_64);

  // ---- 10 AdamW steps on train.rows through the inner trainer
  InnerTrainer tr(c, tc);
  ParamSet q = p;
  const std::vector<float> ref_losses = get("train.losses").to_f32();
  const std::vector<double> ref_norms = get("train.grad_norms").to_f64();
  ASSERT_EQ(ref_losses.size(), size_t(kSteps));
  bool clipped = false;
  for (int s = 0; s < kSteps; ++s) {
    StepStats st = tr.step(q, rows.data(), s);
    EXPECT_DOUBLE_EQ(st.lr, tc.lr);
    const double le = std::fabs(double(st.loss) - ref_losses[s]) / std::fabs(ref_losses[s]);
    const double ne = std::fabs(st.grad_norm - ref_norms[s]) / ref_norms[s];
    std::printf("  step %d  loss C++ %.7f torch %.7f (rel %.2g)  grad norm %.5f / %.5f\n", s,
                st.loss, ref_losses[s], le, st.grad_norm, ref_norms[s]);
    EXPECT_LT(le, 1e-4) << "step " << s;
    EXPECT_LT(ne, 1e-4) << "step " << s;
    clipped |= st.grad_norm > tc.grad_clip;
  }
  EXPECT_TRUE(clipped) << "the test is meant to exercise gradient clipping";
  EXPECT_LT(ref_losses.back(), ref_losses.front());  // it trains at all
  double final_err = 0;
  for (const auto& v : q.layout().views()) {
    const std::vector<float> f = get("final." + v.name).to_f32();
    final_err = std::max(final_err, rel_err(q.data() + v.offset, f.data(), f.size()));
  }
  std::printf("  parameters after %d steps: worst rel err %.3g\n", kSteps, final_err);
  EXPECT_LT(final_err, 1e-3);
}

}  // namespace
}  // namespace atl::algorithms

namespace atl::algorithms {
namespace {

ModelConfig small_model() {
  ModelConfig c;
  c.vocab = 256;
  c.dim = 64;
  c.layers = 2;
  c.heads = 4;
  c.ffn_hidden = 160;
  c.seq_len = 32;
  return c;
}

TEST(TorchReference, LogitsLossGradientsAndAdamWStepsMatchPyTorch) {
  compare_with_torch(small_model());
}

// Dense layers 0 and 2, MoE layer 1 (moe_every = 2): softmax router, 4 experts, top-2, a shared
// expert; coefficients far above the defaults so the router losses weigh in the gradients.
TEST(TorchReference, MixedDenseAndMoeModelMatchesPyTorch) {
  ModelConfig c = small_model();
  c.layers = 3;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 48;
  c.moe_every = 2;
  c.moe_shared_hidden = 32;
  c.moe_aux_coef = 0.1;
  c.moe_z_coef = 0.01;
  compare_with_torch(c);
}

// Grouped-query attention (2 query heads per KV head), q/k/v biases and an untied head: the
// Hugging Face Llama-family variants, in Atoll's layout (adjacent-pair RoPE).
TEST(TorchReference, GroupedQueryBiasesUntiedHeadMatchPyTorch) {
  ModelConfig c = small_model();
  c.kv_heads = 2;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  compare_with_torch(c);
}

// Multi-query attention (one KV head for all 4) with a tied head and no biases.
TEST(TorchReference, MultiQueryAttentionMatchesPyTorch) {
  ModelConfig c = small_model();
  c.kv_heads = 1;
  compare_with_torch(c);
}

// Grouped-query attention under MoE layers (the attention and the FFN are independent).
TEST(TorchReference, GroupedQueryWithMoeMatchesPyTorch) {
  ModelConfig c = small_model();
  c.kv_heads = 2;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 48;
  c.moe_aux_coef = 0.1;
  c.moe_z_coef = 0.01;
  compare_with_torch(c);
}

// Every layer MoE with sigmoid scores (DeepSeek-V3 style), top-3 of 6, no shared expert.
TEST(TorchReference, SigmoidRoutedMoeModelMatchesPyTorch) {
  ModelConfig c = small_model();
  c.moe_experts = 6;
  c.moe_top_k = 3;
  c.moe_hidden = 40;
  c.moe_every = 1;
  c.moe_score = "sigmoid";
  c.moe_aux_coef = 0.1;
  c.moe_z_coef = 0.01;
  compare_with_torch(c);
}

}  // namespace
}  // namespace atl::algorithms
