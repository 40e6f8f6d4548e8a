// Co-located distillation (algorithms/distill/trainer.h) and the Llama entry points it needs
// (forward_hidden, backward_from_hidden).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "algorithms/distill/student.h"
#include "algorithms/distill/trainer.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace atl::algorithms::distill {
namespace {

using kernels::cpu::testing::ScopedThreads;

ModelConfig student_cfg() {
  ModelConfig c;
  c.vocab = 97;  // not a multiple of the shard count
  c.dim = 32;
  c.layers = 1;
  c.heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  return c;
}

ModelConfig teacher_cfg() {
  ModelConfig c = student_cfg();
  c.dim = 48;
  c.layers = 2;
  c.heads = 4;
  c.ffn_hidden = 96;
  return c;
}

TrainerConfig train_cfg() {
  TrainerConfig t;
  t.batch = 3;
  t.seq = 12;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup = 0;
  t.total_steps = 100;
  t.weight_decay = 0.0;
  return t;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Philox r(seed, 7);
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(r.below(i, V));
  return t;
}

// A teacher with confident, structured predictions: random init, head scaled up so its logits
// span several nats (a freshly initialized model predicts nearly uniformly).
ParamSet make_teacher(const ModelConfig& c) {
  ParamSet t(make_layout(c));
  init_params(t, c, 1234);
  const ParamView* e = t.layout().find("model.embed_tokens.weight");
  for (size_t i = 0; i < e->numel(); ++i) t.data()[e->offset + i] *= 40.0f;
  return t;
}

bool same(const ParamSet& a, const ParamSet& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
}

TEST(LlamaHidden, ForwardHiddenThenHeadIsForward) {
  const ModelConfig c = student_cfg();
  ParamSet p(make_layout(c));
  init_params(p, c, 3);
  const int B = 2, T = 10, N = B * T;
  const auto tok = random_tokens(N, c.vocab, 4);
  Llama a(c), b(c);
  a.forward(p, tok.data(), nullptr, B, T);
  const float* h = b.forward_hidden(p, tok.data(), B, T);
  EXPECT_EQ(b.logits(), nullptr);  // no (N, V) buffer on this path
  std::vector<float> logits(size_t(N) * c.vocab);
  kernels::cpu::matmul_forward(logits.data(), h,
                               p.data() + p.layout().find("model.embed_tokens.weight")->offset, N,
                               c.dim, c.vocab);
  EXPECT_EQ(std::memcmp(logits.data(), a.logits(), logits.size() * sizeof(float)), 0);
}

// backward() = head backward + backward_from_hidden, bitwise.
TEST(LlamaHidden, BackwardFromHiddenComposesToBackward) {
  const ModelConfig c = student_cfg();
  ParamSet p(make_layout(c));
  init_params(p, c, 5);
  const int B = 2, T = 9, N = B * T;
  const auto tok = random_tokens(N, c.vocab, 6);
  auto tgt = random_tokens(N, c.vocab, 7);
  tgt[3] = -1;
  Llama a(c), b(c);
  ParamSet ga(p.layout()), gb(p.layout());
  a.forward(p, tok.data(), tgt.data(), B, T);
  a.backward(p, ga);
  // The same head gradient written out: dlogits from softmax_xent, then the tied-head GEMMs.
  b.forward(p, tok.data(), tgt.data(), B, T);
  std::vector<float> dlogits(b.logits(), b.logits() + size_t(N) * c.vocab), losses(N);
  kernels::cpu::softmax_xent(losses.data(), dlogits.data(), dlogits.data(), tgt.data(), N, c.vocab,
                             1.0 / double(b.num_targets()));
  const size_t off = p.layout().find("model.embed_tokens.weight")->offset;
  const float* h = b.forward_hidden(p, tok.data(), B, T);  // same activations again
  std::vector<float> dh(size_t(N) * c.dim, 0.0f);
  kernels::cpu::matmul_backward(dh.data(), gb.data() + off, dlogits.data(), h, p.data() + off, N,
                                c.dim, c.vocab);
  b.backward_from_hidden(p, gb, dh.data());
  EXPECT_TRUE(same(ga, gb));
}

TEST(DistillTrainer, ValidateNamesTheProblem) {
  ModelConfig t = teacher_cfg();
  t.vocab = 98;
  Status st = validate(student_cfg(), t, train_cfg(), LossConfig{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vocab"), std::string::npos) << st.message();
  t = teacher_cfg();
  t.seq_len = 8;
  EXPECT_FALSE(validate(student_cfg(), t, train_cfg(), LossConfig{}).ok());
  EXPECT_FALSE(
      validate(student_cfg(), teacher_cfg(), train_cfg(), LossConfig{2.0, 1.0, 4, 4}).ok());
  EXPECT_TRUE(validate(student_cfg(), teacher_cfg(), train_cfg(), LossConfig{}).ok());
  // The fused loss multiplies by the embedding: an untied head is refused, one line.
  t = teacher_cfg();
  t.tie_word_embeddings = false;
  st = validate(student_cfg(), t, train_cfg(), LossConfig{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("teacher: distillation needs a tied output head"), std::string::npos)
      << st.message();
}

// α = 0: the distillation step is the plain InnerTrainer step. Not bitwise: the fused loss
// forms the cross-entropy gradient from a double log-sum-exp and sums the head GEMMs per tile,
// softmax_xent from a float sum over the full row; the difference is float rounding.
TEST(DistillTrainer, AlphaZeroStepEqualsInnerTrainerStep) {
  const ModelConfig sc = student_cfg(), tc = teacher_cfg();
  const TrainerConfig tr = train_cfg();
  const ParamSet teacher = make_teacher(tc);
  ParamSet p0(make_layout(sc));
  init_params(p0, sc, 11);
  const auto tok = random_tokens(size_t(tr.batch) * (tr.seq + 1), sc.vocab, 12);
  ParamSet pa = p0, pb = p0;
  InnerTrainer inner(sc, tr);
  DistillTrainer dist(sc, tc, tr, LossConfig{0.0, 2.0, 7, 3});
  for (int s = 0; s < 3; ++s) {
    const StepStats a = inner.step(pa, tok.data(), s);
    const DistillStepStats b = dist.step(pb, teacher, tok.data(), s);
    EXPECT_NEAR(b.loss, a.loss, 2e-6 * a.loss) << "step " << s;
    EXPECT_NEAR(b.ce, a.loss, 2e-6 * a.loss);
    EXPECT_EQ(b.kl, 0.0);
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * a.grad_norm);
    double gmax = 0, gerr = 0, perr = 0;
    for (size_t i = 0; i < p0.numel(); ++i) {
      gmax = std::max(gmax, double(std::abs(inner.grads().data()[i])));
      gerr = std::max(gerr, double(std::abs(inner.grads().data()[i] - dist.grads().data()[i])));
      perr = std::max(perr, double(std::abs(pa.data()[i] - pb.data()[i])));
    }
    EXPECT_LE(gerr, 1e-5 * gmax) << "step " << s;
    // AdamW's first steps move each weight by about ±lr whatever the gradient's size, so a
    // rounding-level gradient difference can only move a weight whose gradient is ~0 anyway.
    EXPECT_LE(perr, 1e-3 * tr.lr) << "step " << s;
  }
}

TEST(DistillTrainer, DistillingReducesKl) {
  const ModelConfig sc = student_cfg(), tc = teacher_cfg();
  const TrainerConfig tr = train_cfg();
  const ParamSet teacher = make_teacher(tc);
  ParamSet student(make_layout(sc));
  init_params(student, sc, 21);
  const auto tok = random_tokens(size_t(tr.batch) * (tr.seq + 1), sc.vocab, 22);
  DistillTrainer dist(sc, tc, tr, LossConfig{1.0, 1.0, 8, 5});
  const LossStats before = dist.evaluate(student, teacher, tok.data(), tr.batch);
  double last = 0;
  for (int s = 0; s < 40; ++s) last = dist.step(student, teacher, tok.data(), s).kl;
  const LossStats after = dist.evaluate(student, teacher, tok.data(), tr.batch);
  EXPECT_GT(before.kl, 0.5) << "the teacher should disagree with a fresh student";
  EXPECT_LT(after.kl, 0.3 * before.kl) << "before " << before.kl << " after " << after.kl;
  EXPECT_NEAR(last, after.kl, 0.5 * before.kl);
}

TEST(DistillTrainer, StepIsBitwiseEqualOnOneAndTwoThreads) {
  const ModelConfig sc = student_cfg(), tc = teacher_cfg();
  TrainerConfig tr = train_cfg();
  tr.batch = 4;
  tr.seq = 16;
  const ParamSet teacher = make_teacher(tc);
  ParamSet p0(make_layout(sc));
  init_params(p0, sc, 31);
  const auto tok = random_tokens(size_t(tr.batch) * (tr.seq + 1), sc.vocab, 32);
  auto run = [&](int threads) {
    ScopedThreads st(threads);
    ParamSet p = p0;
    DistillTrainer dist(sc, tc, tr, LossConfig{0.5, 2.0, 16, 3});
    for (int s = 0; s < 2; ++s) dist.step(p, teacher, tok.data(), s);
    return p;
  };
  EXPECT_TRUE(same(run(1), run(2)));
}

// The remote path with an exact (fp32) link: the teacher runs in its own Llama, as the teacher
// service does, and its logits reach a StudentTrainer through a TeacherLogits. Over many steps
// the parameters equal co-located DistillTrainer's bit for bit, so the only difference between
// bench settings (2) and (3) is the bf16 rounding of the teacher's logits on the wire. A schedule,
// clipping, normalization or batch mismatch between the two trainers fails here.
TEST(StudentTrainer, Fp32TargetsGiveTheColocatedParametersBitwise) {
  const ModelConfig sc = student_cfg(), tc = teacher_cfg();
  TrainerConfig tr = train_cfg();
  tr.warmup = 3;  // the schedule's warmup and decay both matter
  tr.total_steps = 12;
  tr.grad_clip = 0.05;  // small enough to clip: the clipping path is compared too
  tr.weight_decay = 0.1;
  const LossConfig lc{0.5, 2.0, 8, 5};
  const ParamSet teacher = make_teacher(tc);
  ParamSet colo(make_layout(sc));
  init_params(colo, sc, 41);
  ParamSet remote = colo;
  DistillTrainer dist(sc, tc, tr, lc);
  StudentTrainer stud(sc, tr, lc);
  Llama teacher_model(tc);  // the teacher service's own model
  const size_t off_t = teacher.layout().find("model.embed_tokens.weight")->offset;
  const int B = tr.batch, T = tr.seq;
  bool clipped = false;
  for (int s = 0; s < 12; ++s) {
    const auto tok = random_tokens(size_t(B) * (T + 1), sc.vocab, 100 + s);  // a batch per step
    std::vector<int32_t> inputs(size_t(B) * T);
    for (int b = 0; b < B; ++b)
      std::copy(tok.begin() + b * (T + 1), tok.begin() + b * (T + 1) + T, inputs.begin() + b * T);
    const float* h = teacher_model.forward_hidden(teacher, inputs.data(), B, T);
    HeadTeacherLogits<float> head(h, teacher.data() + off_t, tc.dim);
    const DistillStepStats a = dist.step(colo, teacher, tok.data(), s);
    auto b = stud.step(remote, tok.data(), s, &head, nullptr);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(a.loss, b->loss) << "step " << s;
    EXPECT_EQ(a.grad_norm, b->grad_norm) << "step " << s;
    EXPECT_EQ(a.lr, b->lr) << "step " << s;
    clipped = clipped || a.grad_norm > tr.grad_clip;
    ASSERT_TRUE(same(colo, remote)) << "parameters differ after step " << s;
  }
  EXPECT_TRUE(clipped) << "the test should exercise clipping";
}

}  // namespace
}  // namespace atl::algorithms::distill
