// Resuming from a safetensors snapshot (params + AdamW moments + step count) continues
// bitwise-identically: the building blocks `atoll train --resume` and DiLoCo nodes rely on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/model/safetensors.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"

namespace atl::algorithms {
namespace {

TEST(InnerTrainer, ResumeFromSafetensorsIsBitwiseIdentical) {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  TrainerConfig t;
  t.batch = 2;
  t.seq = 16;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.warmup = 2;
  t.total_steps = 6;
  const int kSteps = 6, kSplit = 3;
  // Batch of step s: a pure function of (seed, s).
  auto batch = [&](int64_t s) {
    Philox r(77, static_cast<uint64_t>(s));
    std::vector<int32_t> rows(size_t(t.batch) * (t.seq + 1));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(r.below(i, c.vocab));
    return rows;
  };

  ParamSet a(make_layout(c));
  init_params(a, c, 4);
  ParamSet b = a;
  InnerTrainer full(c, t);
  for (int s = 0; s < kSteps; ++s) full.step(a, batch(s).data(), s);

  std::vector<uint8_t> snapshot;
  {
    InnerTrainer first(c, t);
    for (int s = 0; s < kSplit; ++s) first.step(b, batch(s).data(), s);
    Safetensors st;
    append_params(st, b);
    append_params(st, first.optimizer().m(), "optimizer.m.");
    append_params(st, first.optimizer().v(), "optimizer.v.");
    st.metadata["optimizer.step"] = std::to_string(first.optimizer().step_count());
    auto enc = encode_safetensors(st);
    ASSERT_TRUE(enc.ok());
    snapshot = std::move(*enc);
  }
  auto dec = decode_safetensors(snapshot.data(), snapshot.size());
  ASSERT_TRUE(dec.ok()) << dec.status().message();
  ParamSet r(make_layout(c));
  InnerTrainer second(c, t);
  ASSERT_TRUE(read_params(*dec, r, "", /*strict=*/false).ok());
  ASSERT_TRUE(read_params(*dec, second.optimizer().m(), "optimizer.m.").ok());
  ASSERT_TRUE(read_params(*dec, second.optimizer().v(), "optimizer.v.").ok());
  second.optimizer().set_step_count(std::stoll(dec->metadata.at("optimizer.step")));
  for (int s = kSplit; s < kSteps; ++s) second.step(r, batch(s).data(), s);

  EXPECT_EQ(r.fingerprint(), a.fingerprint());
  EXPECT_EQ(second.optimizer().m().fingerprint(), full.optimizer().m().fingerprint());
  EXPECT_EQ(second.optimizer().v().fingerprint(), full.optimizer().v().fingerprint());
  EXPECT_EQ(second.optimizer().step_count(), kSteps);
}

}  // namespace
}  // namespace atl::algorithms
