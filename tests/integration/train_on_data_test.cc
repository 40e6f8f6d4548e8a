// simulate::train_on_data: the one-model training loop the Hydra demo's base model runs (and
// `atoll train`-like callers can share). It must train exactly what the plain loop over
// sample_global_batch trains, split anywhere, and stop on divergence, on request and when the
// caller's callback says so.
#include "simulate/train_on_data.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"

namespace atl::simulate {
namespace {

namespace al = atl::algorithms;

al::ModelConfig tiny_model() {
  al::ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  return c;
}

al::TrainerConfig tiny_trainer() {
  al::TrainerConfig t;
  t.batch = 2;
  t.seq = 16;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.warmup = 2;
  t.total_steps = 6;
  return t;
}

// 4096 pseudo-random tokens below the vocabulary.
al::data::TokenDataset tiny_data() {
  al::data::TokenDataset d;
  d.vocab_size = 64;
  const Philox rng(5, 0);
  for (uint64_t i = 0; i < 4096; ++i) d.tokens.push_back(static_cast<int32_t>(rng.below(i, 64)));
  return d;
}

TEST(TrainOnData, TrainsWhatThePlainLoopTrainsSplitAnywhere) {
  const auto model = tiny_model();
  const auto tc = tiny_trainer();
  const auto data = tiny_data();
  const uint64_t seed = 11;
  al::ParamSet plain(al::make_layout(model));
  al::init_params(plain, model, 3);
  al::ParamSet whole = plain, split = plain;
  const std::string initial = plain.fingerprint();

  al::InnerTrainer plain_trainer(model, tc);
  for (int64_t s = 0; s < 6; ++s) {
    auto b = al::data::sample_global_batch(data, seed, s, tc.batch, tc.seq);
    plain_trainer.step(plain, b.tokens.data(), s);
  }

  al::InnerTrainer whole_trainer(model, tc);
  std::vector<int64_t> seen;
  TrainOnDataOptions o;
  o.data_seed = seed;
  o.end_step = 6;
  o.after_step = [&seen](const TrainedStep& t) {
    seen.push_back(t.step);
    EXPECT_TRUE(std::isfinite(t.stats->loss));
    EXPECT_EQ(t.batch->tokens.size(), size_t{2} * 17);
    return Status::Ok();
  };
  ASSERT_TRUE(train_on_data(whole_trainer, whole, data, o).ok());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));

  al::InnerTrainer split_trainer(model, tc);
  TrainOnDataOptions first;
  first.data_seed = seed;
  first.end_step = 4;
  ASSERT_TRUE(train_on_data(split_trainer, split, data, first).ok());
  TrainOnDataOptions rest = first;
  rest.first_step = 4;
  rest.end_step = 6;
  ASSERT_TRUE(train_on_data(split_trainer, split, data, rest).ok());

  EXPECT_NE(plain.fingerprint(), initial);
  EXPECT_EQ(whole.fingerprint(), plain.fingerprint());
  EXPECT_EQ(split.fingerprint(), plain.fingerprint());
}

TEST(TrainOnData, StopsWhenTheCallbackFailsOrStopIsSet) {
  const auto model = tiny_model();
  const auto data = tiny_data();
  al::ParamSet p(al::make_layout(model));
  al::init_params(p, model, 3);
  al::InnerTrainer trainer(model, tiny_trainer());
  int calls = 0;
  TrainOnDataOptions o;
  o.end_step = 6;
  o.after_step = [&calls](const TrainedStep& t) {
    ++calls;
    return t.step == 1 ? Internal("enough at step 1") : Status::Ok();
  };
  Status s = train_on_data(trainer, p, data, o);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "enough at step 1");
  EXPECT_EQ(calls, 2);

  std::atomic<bool> stop{true};
  TrainOnDataOptions stopped;
  stopped.end_step = 6;
  stopped.stop = &stop;
  s = train_on_data(trainer, p, data, stopped);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("after step 1"), std::string::npos) << s.message();
}

TEST(TrainOnData, RefusesDivergenceAndDataTooShort) {
  const auto model = tiny_model();
  al::ParamSet p(al::make_layout(model));
  al::init_params(p, model, 3);
  al::InnerTrainer trainer(model, tiny_trainer());
  TrainOnDataOptions o;
  o.first_step = 2;
  o.end_step = 6;

  al::data::TokenDataset short_data = tiny_data();
  short_data.tokens.resize(10);  // fewer than one window of T + 1 = 17 tokens
  Status s = train_on_data(trainer, p, short_data, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();

  std::fill(p.vec().begin(), p.vec().end(), std::numeric_limits<float>::quiet_NaN());
  s = train_on_data(trainer, p, tiny_data(), o);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("at step 2"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace atl::simulate
