// A distillation student trained alone (node/distill_inner.h: train_student over a
// DistillInnerStep), as `atoll node --role student` runs it, and the teacher's shard flag.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "algorithms/distill/trainer.h"
#include "kernels/core/philox.h"
#include "node/distill_inner.h"
#include "node/teacher_service.h"
#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;

al::ModelConfig student_cfg() {
  al::ModelConfig c;
  c.vocab = 64;
  c.dim = 16;
  c.layers = 1;
  c.heads = 2;
  c.ffn_hidden = 32;
  c.seq_len = 12;
  return c;
}

al::ModelConfig teacher_cfg() {
  al::ModelConfig c = student_cfg();
  c.dim = 32;
  c.ffn_hidden = 48;
  return c;
}

al::TrainerConfig train_cfg() {
  al::TrainerConfig t;
  t.batch = 2;
  t.seq = 12;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup = 1;
  t.total_steps = 10;
  return t;
}

al::distill::LossConfig loss_cfg(double alpha) {
  al::distill::LossConfig lc;
  lc.alpha = alpha;
  lc.tau = 2.0;
  lc.rows = 8;
  lc.shards = 3;
  return lc;
}

// With the teacher in this process, train_student takes exactly DistillTrainer's steps on the
// batches of (seed, step): the same parameters bit for bit, the same losses reported.
TEST(DistillStudent, ColocatedRunTakesTheTrainersSteps) {
  const auto data = testing::random_tokens(64);
  al::ParamSet teacher(al::make_layout(teacher_cfg()));
  al::init_params(teacher, teacher_cfg(), 9);
  al::ParamSet run_params(al::make_layout(student_cfg()));
  al::init_params(run_params, student_cfg(), 3);
  al::ParamSet ref_params = run_params;

  auto step = DistillInnerStep::create_colocated(loss_cfg(0.5), teacher_cfg(), teacher,
                                                 student_cfg(), train_cfg());
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ((*step)->describe(), "co-located");
  ASSERT_NE((*step)->student_model(), nullptr);
  StudentRunOptions o;
  o.seed = 77;
  o.steps = 4;
  std::vector<StudentStepReport> reports;
  o.on_step = [&](const StudentStepReport& r) { reports.push_back(r); };
  auto run = train_student(**step, run_params, data, o);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->steps_done, 4);
  ASSERT_EQ(reports.size(), 4u);

  al::distill::DistillTrainer ref(student_cfg(), teacher_cfg(), train_cfg(), loss_cfg(0.5));
  for (int64_t s = 0; s < 4; ++s) {
    const auto batch = al::data::sample_global_batch(data, 77, s, 2, 12);
    const auto st = ref.step(ref_params, teacher, batch.tokens.data(), s);
    EXPECT_EQ(reports[s].step, s);
    EXPECT_EQ(reports[s].stats.loss, st.loss) << "step " << s;
    EXPECT_EQ(reports[s].stats.kl, st.kl) << "step " << s;
    EXPECT_EQ(reports[s].bytes_per_token, 0.0);  // nothing crossed a link
  }
  EXPECT_GT(reports[0].stats.kl, 0.0);
  EXPECT_EQ(run_params.fingerprint(), ref_params.fingerprint());
}

// α = 0: the student's cross-entropy alone; a stop request ends the run after the step that
// saw it, without an error.
TEST(DistillStudent, WithoutTeacherStopsOnRequest) {
  const auto data = testing::random_tokens(64);
  al::ParamSet params(al::make_layout(student_cfg()));
  al::init_params(params, student_cfg(), 3);
  const std::string before = params.fingerprint();
  auto step = DistillInnerStep::create_without_teacher(loss_cfg(0), student_cfg(), train_cfg());
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ((*step)->describe(), "no teacher");
  std::atomic<bool> stop{false};
  StudentRunOptions o;
  o.seed = 1;
  o.steps = 10;
  o.stop = &stop;
  o.on_step = [&](const StudentStepReport& r) {
    EXPECT_EQ(r.stats.kl, 0.0);
    EXPECT_GT(r.stats.ce, 0.0);
    if (r.step == 1) stop = true;
  };
  auto run = train_student(**step, params, data, o);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->steps_done, 2);
  EXPECT_NE(params.fingerprint(), before);
}

TEST(DistillStudent, FactoriesRefuseTheWrongAlpha) {
  al::ParamSet teacher(al::make_layout(teacher_cfg()));
  auto colocated = DistillInnerStep::create_colocated(loss_cfg(0), teacher_cfg(), teacher,
                                                      student_cfg(), train_cfg());
  EXPECT_EQ(colocated.status().code(), StatusCode::kInvalidArgument);
  auto alone = DistillInnerStep::create_without_teacher(loss_cfg(0.5), student_cfg(), train_cfg());
  EXPECT_EQ(alone.status().code(), StatusCode::kInvalidArgument);
  al::ParamSet wrong(al::make_layout(student_cfg()));  // the student's shape, not the teacher's
  auto misfit = DistillInnerStep::create_colocated(loss_cfg(0.5), teacher_cfg(), wrong,
                                                   student_cfg(), train_cfg());
  EXPECT_EQ(misfit.status().code(), StatusCode::kInvalidArgument);
}

TEST(DistillStudent, VocabShardIsIOfS) {
  auto a = parse_vocab_shard("1/3");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->first, 1);
  EXPECT_EQ(a->second, 3);
  for (const char* bad : {"3/3", "x", "1/", "/2", "-1/2", "1/0", "1/2/3", " 1/2"}) {
    auto r = parse_vocab_shard(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("must be i/S"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace atl::node
