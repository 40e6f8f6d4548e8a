// LoRA adapters (algorithms/model/lora.h): layout, init, validation, gradients against finite
// differences, the merged model against the adapter model, frozen base, and the whole adapter
// model (forward, backward, 10 AdamW steps) against the PyTorch reference
// tests/tools/torch_llama.py.
#include "algorithms/model/lora.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/safetensors.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "tests/tools/torch_reference.h"

namespace atl::algorithms {
namespace {

namespace fs = std::filesystem;
using atl::testing::rel_err;
using atl::testing::run_torch_llama;
using atl::testing::torch_llama_command;
using atl::testing::torch_unavailable_reason;

ModelConfig tiny() {
  ModelConfig c;
  c.vocab = 32;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 16;
  return c;
}

LoraConfig all_targets(int rank, double alpha) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = alpha;
  l.targets = {"q", "k", "v", "o", "gate", "up", "down"};
  return l;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Philox r(seed, 7);
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(r.below(i, V));
  return t;
}

// A base with weights larger than init and adapters with B != 0, so every path carries signal.
std::shared_ptr<ParamSet> random_base(const ModelConfig& c, uint64_t seed) {
  auto p = std::make_shared<ParamSet>(make_layout(c));
  init_params(*p, c, seed);
  Philox r(seed, 99);
  for (size_t i = 0; i < p->numel(); ++i) p->data()[i] += static_cast<float>(0.3 * r.normal(i));
  return p;
}
ParamSet random_adapters(const LoraConfig& l, const ModelConfig& c, uint64_t seed) {
  ParamSet a(make_lora_layout(l, c));
  init_lora_params(a, l, c, seed);
  Philox r(seed, 98);
  for (const auto& v : a.layout().views())
    if (v.name.ends_with("lora_B.weight"))
      for (size_t i = 0; i < v.numel(); ++i)
        a.data()[v.offset + i] = static_cast<float>(0.3 * r.normal(v.offset + i));
  return a;
}

TEST(Lora, TargetsParseValidateAndLayout) {
  auto t = parse_lora_targets("v,q_proj,down");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(*t, (std::vector<std::string>{"q", "v", "down"}));
  EXPECT_NE(parse_lora_targets("q,x").status().message().find("'x' is not one of"),
            std::string::npos);
  EXPECT_NE(parse_lora_targets("q,q").status().message().find("listed twice"), std::string::npos);
  ModelConfig c = tiny();
  LoraConfig l = all_targets(4, 8);
  EXPECT_TRUE(validate(l, c).ok());
  l.rank = 0;
  EXPECT_NE(validate(l, c).message().find("rank must be in [1, 4096]"), std::string::npos);
  l.rank = 4;
  l.alpha = -1;
  EXPECT_NE(validate(l, c).message().find("alpha"), std::string::npos);
  l.alpha = 8;
  ModelConfig moe = c;
  moe.moe_experts = 2;
  moe.moe_hidden = 8;
  EXPECT_NE(validate(l, moe).message().find("MoE"), std::string::npos);

  // Shapes: C = 16, Ckv = 8 (2 KV heads of 4), F = 24, r = 4.
  const ParamLayout L = make_lora_layout(l, c);
  auto shape = [&](const std::string& n) { return L.find(n)->shape; };
  EXPECT_EQ(shape("model.layers.1.self_attn.q_proj.lora_A.weight"), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(shape("model.layers.1.self_attn.k_proj.lora_B.weight"), (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.lora_A.weight"), (std::vector<int64_t>{4, 24}));
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.lora_B.weight"), (std::vector<int64_t>{16, 4}));
  // Per layer r·(in + out): q 4·32, k 4·24, v 4·24, o 4·32, gate 4·40, up 4·40, down 4·40.
  EXPECT_EQ(count_lora_params(l, c), 2 * 4 * (32 + 24 + 24 + 32 + 40 + 40 + 40));
}

TEST(Lora, InitIsPeftKaimingUniformAndZeroB) {
  ModelConfig c = tiny();
  LoraConfig l = all_targets(8, 16);
  ParamSet a(make_lora_layout(l, c)), b(make_lora_layout(l, c));
  init_lora_params(a, l, c, 5);
  init_lora_params(b, l, c, 5);
  EXPECT_EQ(a.vec(), b.vec());  // a pure function of the seed
  for (const auto& v : a.layout().views()) {
    const float* p = a.data() + v.offset;
    if (v.name.ends_with("lora_B.weight")) {
      for (size_t i = 0; i < v.numel(); ++i) ASSERT_EQ(p[i], 0.0f) << v.name;
      continue;
    }
    const double bound = 1.0 / std::sqrt(double(v.shape[1]));
    double mx = 0, sum2 = 0;
    for (size_t i = 0; i < v.numel(); ++i) {
      mx = std::max(mx, std::fabs(double(p[i])));
      sum2 += double(p[i]) * p[i];
    }
    EXPECT_LE(mx, bound) << v.name;
    EXPECT_GT(mx, 0.8 * bound) << v.name;  // spans the interval
    // U(-b, b) has variance b²/3.
    EXPECT_NEAR(sum2 / v.numel(), bound * bound / 3, 0.35 * bound * bound / 3) << v.name;
  }
}

// A fresh adapter (B = 0) leaves the model's outputs exactly as they were.
TEST(Lora, FreshAdaptersLeaveTheBaseModelUnchanged) {
  ModelConfig c = tiny();
  auto base = random_base(c, 3);
  LoraConfig l = all_targets(4, 8);
  ParamSet a(make_lora_layout(l, c));
  init_lora_params(a, l, c, 1);
  const int B = 2, T = 8;
  auto tok = random_tokens(B * T, c.vocab, 1), tgt = random_tokens(B * T, c.vocab, 2);
  Llama plain(c), adapted(c);
  adapted.attach_lora(l, base);
  EXPECT_EQ(adapted.layout(), a.layout());
  const float l0 = plain.forward(*base, tok.data(), tgt.data(), B, T);
  const float l1 = adapted.forward(a, tok.data(), tgt.data(), B, T);
  EXPECT_EQ(l0, l1);
  for (size_t i = 0; i < size_t(B) * T * c.vocab; ++i)
    ASSERT_EQ(plain.logits()[i], adapted.logits()[i]) << i;
}

// Central finite differences of the loss on A and B of every target, at the coordinates with the
// largest analytic gradient; the base gets no gradient at all (its ParamSet is not even there).
TEST(Lora, AdapterGradientsMatchFiniteDifferences) {
  ModelConfig c = tiny();
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  auto base = random_base(c, 7);
  const ParamSet base_before = *base;
  LoraConfig l = all_targets(3, 6);
  ParamSet a = random_adapters(l, c, 11);
  const int B = 2, T = 8;
  auto tok = random_tokens(B * T, c.vocab, 3), tgt = random_tokens(B * T, c.vocab, 4);
  Llama m(c);
  m.attach_lora(l, base);
  ParamSet g(m.layout());
  g.zero();
  m.forward(a, tok.data(), tgt.data(), B, T);
  m.backward(a, g);
  EXPECT_EQ(g.numel(), size_t(count_lora_params(l, c)));
  for (const auto& v : a.layout().views()) {
    if (v.name.find("layers.0.") == std::string::npos && v.name.find("q_proj") == std::string::npos)
      continue;  // every target of layer 0 and q of layer 1
    std::vector<size_t> idx(v.numel());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = v.offset + i;
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](size_t x, size_t y) {
      return std::fabs(g.data()[x]) > std::fabs(g.data()[y]);
    });
    for (int j = 0; j < 2; ++j) {
      const size_t i = idx[j];
      const float keep = a.data()[i], h = 1e-2f;
      a.data()[i] = keep + h;
      const double up = m.forward(a, tok.data(), tgt.data(), B, T);
      a.data()[i] = keep - h;
      const double down = m.forward(a, tok.data(), tgt.data(), B, T);
      a.data()[i] = keep;
      const double fd = (up - down) / (2.0 * h), an = g.data()[i];
      EXPECT_GT(std::fabs(an), 1e-3) << v.name << ": gradient too small to check";
      EXPECT_NEAR(an, fd, 2e-2 * std::fabs(an)) << v.name << " element " << i - v.offset;
    }
  }
  EXPECT_EQ(base->vec(), base_before.vec());
}

// W + (alpha/r)·B·A as a plain model gives the adapter model's logits.
TEST(Lora, MergedWeightsGiveTheSameLogits) {
  ModelConfig c = tiny();
  auto base = random_base(c, 21);
  LoraConfig l;
  l.rank = 4;
  l.alpha = 12;
  l.targets = {"q", "v", "o", "up", "down"};
  ParamSet a = random_adapters(l, c, 22);
  auto merged = merge_lora(*base, a, l, c);
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  const int B = 2, T = 12;
  auto tok = random_tokens(B * T, c.vocab, 23);
  Llama plain(c), adapted(c);
  adapted.attach_lora(l, base);
  plain.forward(*merged, tok.data(), nullptr, B, T);
  adapted.forward(a, tok.data(), nullptr, B, T);
  double num = 0, den = 0;
  for (size_t i = 0; i < size_t(B) * T * c.vocab; ++i) {
    num = std::max(num, std::fabs(double(plain.logits()[i]) - adapted.logits()[i]));
    den = std::max(den, std::fabs(double(adapted.logits()[i])));
  }
  EXPECT_LT(num / den, 1e-5);
  // And the adapters do change the model (the comparison is not vacuous).
  Llama base_model(c);
  base_model.forward(*base, tok.data(), nullptr, B, T);
  double diff = 0;
  for (size_t i = 0; i < size_t(B) * T * c.vocab; ++i)
    diff = std::max(diff, std::fabs(double(base_model.logits()[i]) - adapted.logits()[i]));
  EXPECT_GT(diff / den, 1e-2);
  // Mismatched layouts are refused with one line.
  ParamSet wrong(make_lora_layout(all_targets(4, 12), c));
  EXPECT_NE(merge_lora(*base, wrong, l, c).status().message().find("do not match the LoRA"),
            std::string::npos);
}

// The inner trainer trains only the adapters: its gradients and AdamW moments have the adapter
// layout, the base is untouched, the loss falls, and two runs give the same bits.
TEST(Lora, InnerTrainerFineTunesAdaptersOnly) {
  ModelConfig c = tiny();
  auto base = random_base(c, 31);
  const ParamSet base_before = *base;
  LoraConfig l = all_targets(4, 8);
  TrainerConfig tc;
  tc.batch = 4;
  tc.seq = 8;
  tc.lr = 1e-2;
  tc.min_lr = 1e-2;
  tc.warmup = 0;
  tc.total_steps = 30;
  auto rows = random_tokens(size_t(tc.batch) * (tc.seq + 1), c.vocab, 33);
  auto run = [&]() {
    InnerTrainer tr(c, tc);
    tr.attach_lora(l, base);
    EXPECT_EQ(tr.grads().numel(), size_t(count_lora_params(l, c)));
    EXPECT_EQ(tr.optimizer().m().numel(), size_t(count_lora_params(l, c)));
    ParamSet a(make_lora_layout(l, c));
    init_lora_params(a, l, c, 34);
    float first = 0, last = 0;
    for (int s = 0; s < 30; ++s) {
      StepStats st = tr.step(a, rows.data(), s);
      if (s == 0) first = st.loss;
      last = st.loss;
    }
    EXPECT_LT(last, 0.8f * first);
    return a;
  };
  ParamSet a1 = run(), a2 = run();
  EXPECT_EQ(a1.vec(), a2.vec());
  EXPECT_EQ(a1.fingerprint(), a2.fingerprint());
  EXPECT_EQ(base->vec(), base_before.vec());
}

// ---- bf16-stored base (algorithms/model/frozen_base.h) -----------------------------------------

// A bf16 store is half the bytes, rounds each parameter to nearest even once, and widens a value
// that was bf16 already back to exactly itself.
TEST(LoraBf16Base, StoresHalfTheBytesAndRoundsOnce) {
  ModelConfig c = tiny();
  auto base = random_base(c, 41);
  auto fp32 = FrozenBase::fp32(base);
  auto bf16 = FrozenBase::bf16(*base);
  EXPECT_EQ(fp32->stored_bytes(), base->numel() * 4);
  EXPECT_EQ(bf16->stored_bytes(), base->numel() * 2);
  EXPECT_EQ(fp32->fp32_data(), base->data());  // shared, not copied
  EXPECT_EQ(bf16->fp32_data(), nullptr);
  const ParamSet rounded = bf16->widened();
  size_t changed = 0;
  for (size_t i = 0; i < base->numel(); ++i) {
    const float x = base->data()[i], y = rounded.data()[i];
    changed += x != y;
    EXPECT_LE(std::fabs(x - y), std::ldexp(std::fabs(x), -8)) << i;  // half an ulp of 8 bits
  }
  EXPECT_GT(changed, base->numel() / 2);  // random fp32 values are rarely bf16 already
  EXPECT_EQ(FrozenBase::bf16(rounded)->widened().vec(), rounded.vec());
  EXPECT_EQ(parse_base_storage("bf16").value(), BaseStorage::kBf16);
  EXPECT_NE(parse_base_storage("fp16").status().message().find("use fp32"), std::string::npos);
}

// The model over a bf16-stored base computes exactly as the fp32 model over the base rounded to
// bf16 once: the same loss, adapter gradients and 8 AdamW steps, bit for bit, for a grouped-query
// model with biases and an untied head (every tensor outside the blocks widened too) and for a
// tied one.
TEST(LoraBf16Base, TrainsBitwiseAsTheFp32ModelOverTheRoundedBase) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head, q/k/v biases");
    ModelConfig c = tiny();
    c.tie_word_embeddings = tied;
    c.attention_bias = !tied;
    auto base = random_base(c, 43);
    LoraConfig stored_bf16 = all_targets(4, 8), in_fp32 = all_targets(4, 8);
    stored_bf16.base_storage = BaseStorage::kBf16;
    auto rounded = std::make_shared<ParamSet>(FrozenBase::bf16(*base)->widened());
    TrainerConfig tc;
    tc.batch = 2;
    tc.seq = 8;
    tc.lr = 1e-2;
    tc.min_lr = 1e-3;
    tc.warmup = 2;
    tc.total_steps = 8;
    auto rows = random_tokens(size_t(tc.batch) * (tc.seq + 1), c.vocab, 44);
    auto train = [&](const LoraConfig& l, std::shared_ptr<const ParamSet> b, float* first_loss) {
      InnerTrainer tr(c, tc);
      tr.attach_lora(l, std::move(b));
      ParamSet a = random_adapters(l, c, 45);
      for (int s = 0; s < 8; ++s) {
        StepStats st = tr.step(a, rows.data(), s);
        if (s == 0) *first_loss = st.loss;
      }
      return a;
    };
    float loss_bf16 = 0, loss_rounded = 0, loss_fp32 = 0;
    const ParamSet a_bf16 = train(stored_bf16, base, &loss_bf16);
    const ParamSet a_rounded = train(in_fp32, rounded, &loss_rounded);
    const ParamSet a_fp32 = train(in_fp32, base, &loss_fp32);
    EXPECT_EQ(loss_bf16, loss_rounded);
    EXPECT_EQ(a_bf16.vec(), a_rounded.vec());
    // ...and the rounding is not a no-op: the unrounded base trains to other bits.
    EXPECT_NE(a_bf16.vec(), a_fp32.vec());
    EXPECT_NEAR(loss_bf16, loss_fp32, 1e-2 * loss_fp32);
  }
}

// A frozen base stored otherwise than the LoRA config says is a programming error.
TEST(LoraBf16BaseDeathTest, BaseStoredOtherwiseThanTheConfigAborts) {
  ModelConfig c = tiny();
  Llama m(c);
  LoraConfig l = all_targets(2, 4);  // fp32
  auto bf16 = FrozenBase::bf16(*random_base(c, 47));
  EXPECT_DEATH(m.attach_lora(l, bf16), "not stored as the LoRA config says");
}

// ---- PyTorch reference ------------------------------------------------------------------------

// Forward, backward (adapter gradients) and 10 InnerTrainer steps against torch_llama.py with the
// same tolerances as tests/algorithms/torch_reference_test.cc.
void compare_lora_with_torch(const ModelConfig& c, const LoraConfig& l) {
  if (const std::string why = torch_unavailable_reason(); !why.empty()) FAIL() << why;
  const int B = 2, T = 16, kSteps = 10;
  TrainerConfig tc;
  tc.batch = B;
  tc.seq = T;
  tc.lr = 1e-3;  // as the full-model comparison: larger steps amplify fp32 rounding (chaos)
  tc.min_lr = 1e-3;
  tc.warmup = 0;
  tc.total_steps = kSteps;
  tc.weight_decay = 0.1;
  tc.grad_clip = 0.5;

  auto base = random_base(c, 41);
  ParamSet a = random_adapters(l, c, 42);
  auto tok = random_tokens(B * T, c.vocab, 43), tgt = random_tokens(B * T, c.vocab, 44);
  auto rows = random_tokens(B * (T + 1), c.vocab, 45);
  tgt[5] = -1;

  Safetensors in;
  append_params(in, *base);
  append_params(in, a);
  in.tensors.push_back(make_tensor("batch.inputs", {B, T}, tok.data()));
  in.tensors.push_back(make_tensor("batch.targets", {B, T}, tgt.data()));
  in.tensors.push_back(make_tensor("train.rows", {B, T + 1}, rows.data()));
  in.metadata = atl::testing::torch_reference_metadata(c, tc, kSteps);
  in.metadata["lora_rank"] = std::to_string(l.rank);
  in.metadata["lora_alpha"] = atl::testing::exact_decimal(l.alpha);
  atl::testing::ReferenceTempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path in_path = dir.path / "in.safetensors", out_path = dir.path / "out.safetensors";
  auto enc = encode_safetensors(in);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  {
    std::ofstream f(in_path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(enc->data()), std::streamsize(enc->size()));
  }
  const std::vector<std::string> args = {in_path.string(), out_path.string()};
  ASSERT_EQ(run_torch_llama(args), 0) << "failed: " << torch_llama_command(args);
  std::ifstream f(out_path, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), {}};
  auto ref = decode_safetensors(bytes.data(), bytes.size());
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto get = [&](const std::string& n) {
    const StTensor* t = ref->find(n);
    EXPECT_NE(t, nullptr) << "PyTorch output lacks " << n;
    return t ? t->to_f32() : std::vector<float>{};
  };
  // The reference trained nothing but the adapters.
  EXPECT_EQ(ref->find("grad.model.norm.weight"), nullptr);

  Llama m(c);
  m.attach_lora(l, base);
  ParamSet g(m.layout());
  g.zero();
  const float loss = m.forward(a, tok.data(), tgt.data(), B, T);
  const auto ref_logits = get("logits");
  ASSERT_EQ(ref_logits.size(), size_t(B) * T * c.vocab);
  EXPECT_LT(rel_err(m.logits(), ref_logits.data(), ref_logits.size()), 1e-5);
  EXPECT_LT(std::fabs(loss - get("loss")[0]) / std::fabs(get("loss")[0]), 1e-5);
  m.backward(a, g);
  double worst = 0;
  for (const auto& v : a.layout().views()) {
    const auto rg = get("grad." + v.name);
    ASSERT_EQ(rg.size(), v.numel()) << v.name;
    const double e = rel_err(g.data() + v.offset, rg.data(), rg.size());
    EXPECT_LT(e, 1e-4) << "gradient of " << v.name;
    worst = std::max(worst, e);
  }
  std::printf("  adapter gradients: worst rel err vs torch f32 %.3g\n", worst);

  InnerTrainer tr(c, tc);
  tr.attach_lora(l, base);
  const auto ref_losses = get("train.losses");
  ASSERT_EQ(ref_losses.size(), size_t(kSteps));
  const auto ref_norms = ref->find("train.grad_norms")->to_f64();
  for (int s = 0; s < kSteps; ++s) {
    StepStats st = tr.step(a, rows.data(), s);
    EXPECT_LT(std::fabs(st.loss - ref_losses[s]) / std::fabs(ref_losses[s]), 1e-4) << s;
    EXPECT_LT(std::fabs(st.grad_norm - ref_norms[s]) / ref_norms[s], 1e-4) << s;
    std::printf("  step %d  loss C++ %.7f torch %.7f  grad norm %.6f / %.6f\n", s, st.loss,
                ref_losses[s], st.grad_norm, ref_norms[s]);
  }
  EXPECT_LT(ref_losses.back(), ref_losses.front());
  double final_err = 0;
  for (const auto& v : a.layout().views()) {
    const auto fin = get("final." + v.name);
    final_err = std::max(final_err, rel_err(a.data() + v.offset, fin.data(), fin.size()));
  }
  std::printf("  adapters after %d steps: worst rel err %.3g\n", kSteps, final_err);
  EXPECT_LT(final_err, 1e-3);
}

TEST(LoraTorchReference, EveryTargetOnGroupedQueryBiasesUntiedHead) {
  ModelConfig c = tiny();
  c.vocab = 64;
  c.dim = 32;
  c.ffn_hidden = 40;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  compare_lora_with_torch(c, all_targets(4, 8));
}

TEST(LoraTorchReference, AttentionTargetsOnTheDefaultModel) {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 4;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  LoraConfig l;
  l.rank = 2;
  l.alpha = 4;
  l.targets = {"q", "k", "v", "o"};
  compare_lora_with_torch(c, l);
}

}  // namespace
}  // namespace atl::algorithms
