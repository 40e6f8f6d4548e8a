// The inner-step factory: the step it picks trains exactly as the trainer it wraps (bit for
// bit), Hydra's step reports its trained set, and impossible combinations are refused with one
// line before anything is built or connected.
#include "node/inner_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "node/site_config.h"
#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;
using testing::small_join;

SiteConfig site_of(const atoll_pb::v1::JoinResponse& j) {
  auto s = site_config_from_join(j);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : SiteConfig{};
}

al::data::GlobalBatch random_batch(const SiteConfig& site, uint64_t seed) {
  al::data::GlobalBatch b;
  b.B = site.train.batch;
  b.T = site.train.seq;
  b.tokens.resize(static_cast<size_t>(b.B) * (b.T + 1));
  Philox r(seed, 3);
  for (size_t i = 0; i < b.tokens.size(); ++i)
    b.tokens[i] = static_cast<int32_t>(r.below(i, site.model.vocab));
  return b;
}

InnerStepOptions on_gpus(std::vector<int> ids, std::string name) {
  InnerStepOptions o;
  o.devices.cuda = std::move(ids);
  o.devices.name = std::move(name);
  return o;
}

InnerStepOptions with_teacher() {
  InnerStepOptions o;
  o.distill.teachers = {"127.0.0.1:1"};
  o.distill.wait_s = 0;
  return o;
}

TEST(SiteConfig, ReadsTheJoinResponseWithThisSitesSeed) {
  auto j = small_join();
  j.mutable_train()->set_precision("bf16");
  const SiteConfig s = site_of(j);
  EXPECT_EQ(s.model.dim, 32);
  EXPECT_EQ(s.train.batch, 2);
  EXPECT_EQ(s.train.seq, 16);
  EXPECT_EQ(s.seed, site_seed(42, "site-1"));
  EXPECT_NE(s.seed, site_seed(42, "site-2"));
  EXPECT_EQ(s.train.precision_seed, s.seed);
  EXPECT_EQ(s.train.precision, al::Precision::kBf16);
  EXPECT_FALSE(s.hydra());
  EXPECT_FALSE(s.streaming());
  auto bad = small_join();
  bad.mutable_model()->set_heads(5);  // does not divide dim 32
  EXPECT_FALSE(site_config_from_join(bad).ok());
}

// Three steps through the factory's CPU step and through InnerTrainer: the same θ, bit for bit.
TEST(InnerStepFactory, CpuStepTrainsAsTheInnerTrainer) {
  const SiteConfig site = site_of(small_join());
  auto step = make_inner_step(site, InnerStepOptions{});
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ((*step)->describe(), "");
  EXPECT_FALSE((*step)->wants_next_batch());
  al::InnerTrainer reference(site.model, site.train);
  al::ParamSet a(al::make_layout(site.model)), b(al::make_layout(site.model));
  al::init_params(a, site.model, 5);
  b.vec() = a.vec();
  ASSERT_TRUE((*step)->begin(a).ok());
  for (int64_t k = 0; k < 3; ++k) {
    const auto batch = random_batch(site, k);
    auto got = (*step)->step(a, batch, nullptr, k);
    ASSERT_TRUE(got.ok());
    const al::StepStats want = reference.step(b, batch.tokens.data(), k);
    EXPECT_EQ(got->loss, want.loss);
    EXPECT_EQ(got->lr, want.lr);
    EXPECT_EQ(got->tokens, int64_t{site.train.batch} * site.train.seq);
  }
  ASSERT_TRUE((*step)->end(a).ok());
  EXPECT_EQ(a.vec(), b.vec());
  EXPECT_EQ((*step)->set_subnet(al::full_subnet(site.model, 3, true)).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(InnerStepFactory, HydraStepTrainsTheSubnetworkAsHydraTrainer) {
  const SiteConfig site = site_of(small_join("hydra"));
  auto step = make_inner_step(site, InnerStepOptions{});
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  al::hydra::HydraTrainer reference(site.model, site.train);
  al::Subnet sub = al::full_subnet(site.model, 3, false);
  sub.layers[1].train = true;
  sub.layers[2].train = true;
  sub.layers[2].ffn_blocks[1] = 0;
  auto trained = (*step)->set_subnet(sub);
  ASSERT_TRUE(trained.ok()) << trained.status().to_string();
  ASSERT_TRUE(reference.set_subnet(sub).ok());
  EXPECT_EQ(std::vector<uint32_t>(trained->indices.begin(), trained->indices.end()),
            al::trainable_indices(sub, site.model));
  EXPECT_EQ(trained->generation, reference.trained_set_generation());
  al::ParamSet a(al::make_layout(site.model)), b(al::make_layout(site.model));
  al::init_params(a, site.model, 6);
  b.vec() = a.vec();
  for (int64_t k = 0; k < 3; ++k) {
    const auto batch = random_batch(site, 10 + k);
    auto got = (*step)->step(a, batch, nullptr, k);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->loss, reference.step(b, batch.tokens.data(), k).loss);
  }
  EXPECT_EQ(a.vec(), b.vec());
  // Another trained set: a new generation.
  sub.layers[1].train = false;
  auto again = (*step)->set_subnet(sub);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->generation, trained->generation);
}

// Impossible combinations: one line, from check_inner_step and make_inner_step alike, before
// any teacher is contacted or device opened. Every algorithm takes one GPU.
TEST(InnerStepFactory, RefusesImpossibleCombinationsWithOneLine) {
  auto bad_blocks = small_join("hydra");
  bad_blocks.mutable_train()->set_ffn_blocks(5);  // 48 is not a multiple of 5
  struct Case {
    SiteConfig site;
    InnerStepOptions options;
    StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {site_of(small_join("hydra")), with_teacher(), StatusCode::kInvalidArgument,
       "--teacher cannot be used in a Hydra experiment"},
      {site_of(bad_blocks), InnerStepOptions{}, StatusCode::kInvalidArgument,
       "ffn_blocks 5 does not divide ffn_hidden 48"},
      {site_of(small_join("hydra")), on_gpus({0, 1}, "cuda:0,cuda:1"),
       StatusCode::kFailedPrecondition,
       "--devices cuda:0,cuda:1: Hydra subnetworks train on one GPU: use --device cuda:N"},
      {site_of(small_join()),
       [] {
         InnerStepOptions o = with_teacher();
         o.devices = on_gpus({0, 1}, "cuda:0,cuda:1").devices;
         return o;
       }(),
       StatusCode::kFailedPrecondition, "--devices cuda:0,cuda:1: distillation (--teacher)"},
  };
  for (const Case& c : cases) {
    Status checked = check_inner_step(c.site, c.options);
    EXPECT_EQ(checked.code(), c.code) << c.says;
    EXPECT_NE(checked.message().find(c.says), std::string::npos) << checked.message();
    EXPECT_EQ(checked.message().find('\n'), std::string::npos);
    auto made = make_inner_step(c.site, c.options);
    ASSERT_FALSE(made.ok()) << c.says;
    EXPECT_EQ(made.status().message(), checked.message());
  }
  // A student needs credentials for its teachers (run_node builds them from --tls).
  auto no_tls = make_inner_step(site_of(small_join()), with_teacher());
  ASSERT_FALSE(no_tls.ok());
  EXPECT_NE(no_tls.status().message().find("teacher_tls"), std::string::npos);
  EXPECT_TRUE(check_inner_step(site_of(small_join()), InnerStepOptions{}).ok());
  EXPECT_TRUE(check_inner_step(site_of(small_join()), with_teacher()).ok());
  // One GPU takes every algorithm; several take the plain step.
  EXPECT_TRUE(check_inner_step(site_of(small_join("hydra")), on_gpus({0}, "cuda:0")).ok());
  InnerStepOptions student_on_gpu = with_teacher();
  student_on_gpu.devices = on_gpus({0}, "cuda:0").devices;
  EXPECT_TRUE(check_inner_step(site_of(small_join()), student_on_gpu).ok());
  EXPECT_TRUE(check_inner_step(site_of(small_join()), on_gpus({0, 1}, "cuda:0,cuda:1")).ok());
}

// Hydra's step on cuda:0 against the CPU's, with a GPU and the CUDA build; elsewhere the factory
// refuses the GPU with one line (the build or the device) and the test skips.
TEST(InnerStepFactory, HydraStepOnAGpuTracksTheCpuStep) {
  const SiteConfig site = site_of(small_join("hydra"));
  auto devices = resolve_devices("cuda:0", "");
  if (!devices.ok()) {
    auto made = make_inner_step(site, on_gpus({0}, "cuda:0"));
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().message().find('\n'), std::string::npos) << made.status().message();
    EXPECT_NE(made.status().message().find("CUDA"), std::string::npos) << made.status().message();
    GTEST_SKIP() << devices.status().message();
  }
  InnerStepOptions gpu_options;
  gpu_options.devices = *devices;
  auto gpu = make_inner_step(site, gpu_options);
  auto cpu = make_inner_step(site, InnerStepOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*gpu)->describe(), "training Hydra subnetworks on cuda:0");
  al::Subnet sub = al::full_subnet(site.model, 3, false);
  sub.layers[2].train = true;
  sub.layers[1].heads[2] = 0;
  sub.layers[2].ffn_blocks[0] = 0;
  auto a = (*cpu)->set_subnet(sub);
  auto b = (*gpu)->set_subnet(sub);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(
      std::equal(a->indices.begin(), a->indices.end(), b->indices.begin(), b->indices.end()));
  al::ParamSet pc(al::make_layout(site.model)), pg(al::make_layout(site.model));
  al::init_params(pc, site.model, 8);
  pg.vec() = pc.vec();
  for (int64_t k = 0; k < 4; ++k) {
    const auto batch = random_batch(site, 20 + k);
    ASSERT_TRUE((*gpu)->begin(pg).ok());
    auto sg = (*gpu)->step(pg, batch, nullptr, k);
    ASSERT_TRUE((*gpu)->end(pg).ok());
    auto sc = (*cpu)->step(pc, batch, nullptr, k);
    ASSERT_TRUE(sg.ok() && sc.ok()) << sg.status().to_string();
    EXPECT_NEAR(sg->loss, sc->loss, 1e-4 * sc->loss) << "step " << k;
    EXPECT_NEAR(sg->grad_norm, sc->grad_norm, 1e-4 * sc->grad_norm) << "step " << k;
  }
}

// The CUDA step's AdamW state, saved through the host and put back (node/round_snapshot.h), and
// through its bytes (a node's --state-dir): the steps after a restore repeat the steps after the
// save bit for bit, and the steps from the advanced state do not. Skips without a GPU and the
// CUDA build.
TEST(InnerStepFactory, CudaStepSnapshotRedoesItsStepsBitwise) {
  const SiteConfig site = site_of(small_join());
  auto devices = resolve_devices("cuda:0", "");
  if (!devices.ok()) GTEST_SKIP() << devices.status().message();
  InnerStepOptions gpu_options;
  gpu_options.devices = *devices;
  auto made = make_inner_step(site, gpu_options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  InnerStep& gpu = **made;
  al::ParamSet p(al::make_layout(site.model));
  al::init_params(p, site.model, 8);
  auto steps = [&](int64_t first, al::ParamSet& local) {
    ASSERT_TRUE(gpu.begin(local).ok());
    for (int64_t k = first; k < first + 3; ++k)
      ASSERT_TRUE(gpu.step(local, random_batch(site, 40 + k), nullptr, k).ok());
    ASSERT_TRUE(gpu.end(local).ok());
  };
  steps(0, p);  // moments and step count not zero
  auto saved = gpu.save_state();
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  auto bytes = gpu.encode_state(**saved);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  const std::vector<float> start = p.vec();
  steps(3, p);
  const std::vector<float> first = p.vec();
  p.vec() = start;
  steps(3, p);
  EXPECT_NE(p.vec(), first) << "the advanced state repeated the steps: the test cannot tell";
  ASSERT_TRUE(gpu.restore_state(**saved).ok());
  p.vec() = start;
  steps(3, p);
  EXPECT_EQ(p.vec(), first);
  auto decoded = gpu.decode_state(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  ASSERT_TRUE(gpu.restore_state(**decoded).ok());
  p.vec() = start;
  steps(3, p);
  EXPECT_EQ(p.vec(), first);
}

}  // namespace
}  // namespace atl::node
