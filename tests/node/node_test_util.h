// Shared by the node tests: the JoinResponse of a small experiment, θ-like values, and
// coordinator calls that never reach one.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/philox.h"
#include "node/coordinator_calls.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node::testing {

// A small model (C 32, L 3, H 4, F 48 in 3 Hydra blocks, T 16, vocab 64), batch 2, 20 steps.
inline atoll_pb::v1::JoinResponse small_join(const std::string& algorithm = "diloco",
                                             const std::string& codec = "none") {
  atoll_pb::v1::JoinResponse j;
  j.set_node_id("site-1");
  j.set_experiment_id("exp");
  auto* m = j.mutable_model();
  m->set_vocab(64);
  m->set_dim(32);
  m->set_layers(3);
  m->set_heads(4);
  m->set_ffn_hidden(48);
  m->set_seq_len(16);
  m->set_rope_base(10000);
  m->set_norm_eps(1e-5);
  auto* t = j.mutable_train();
  t->set_batch_size(2);
  t->set_lr(1e-2);
  t->set_min_lr(1e-3);
  t->set_warmup_steps(2);
  t->set_total_inner_steps(20);
  t->set_weight_decay(0.1);
  t->set_beta1(0.9);
  t->set_beta2(0.95);
  t->set_grad_clip(1.0);
  t->set_seed(42);
  t->set_codec(codec);
  t->set_error_feedback(true);
  t->set_algorithm(algorithm);
  t->set_ffn_blocks(3);
  return j;
}

// Values in [-scale, scale), reproducible from (seed, stream).
inline void fill_random(algorithms::ParamSet& p, uint64_t seed, float scale = 1.0f) {
  Philox r(seed, 11);
  for (size_t i = 0; i < p.numel(); ++i) p.data()[i] = scale * (2.0f * r.uniform(i) - 1.0f);
}

// Calls that never reach a coordinator (Unavailable); the link comes up after `link_up_after`
// if set. Tests override the calls they answer.
class UnreachableCalls : public CoordinatorCalls {
 public:
  explicit UnreachableCalls(std::optional<std::chrono::milliseconds> link_up_after = std::nullopt)
      : t0_(std::chrono::steady_clock::now()), link_up_after_(link_up_after) {}
  const std::string& target() const override { return target_; }
  Status join(const atoll_pb::v1::JoinRequest&, atoll_pb::v1::JoinResponse*) override { return down(); }
  Status heartbeat(const atoll_pb::v1::HeartbeatRequest&, atoll_pb::v1::HeartbeatResponse*) override { return down(); }
  Status next_task(const atoll_pb::v1::NextTaskRequest&, atoll_pb::v1::Task*) override { return down(); }
  Status pull_params(const atoll_pb::v1::PullParamsRequest&, atoll_pb::v1::TensorHeader*, std::string*) override {
    return down();
  }
  Status push_update(const atoll_pb::v1::TensorHeader&, std::string_view, atoll_pb::v1::PushUpdateResponse*) override {
    return down();
  }
  Status report_metrics(const atoll_pb::v1::MetricsReport&, atoll_pb::v1::MetricsAck*) override { return down(); }
  Status leave(const atoll_pb::v1::LeaveRequest&, atoll_pb::v1::LeaveResponse*) override { return down(); }
  Status report_importance(const atoll_pb::v1::ImportanceReport&, atoll_pb::v1::ImportanceAck*) override {
    return down();
  }
  Status advertise_keys(const atoll_pb::v1::SecAggKeys&, atoll_pb::v1::SecAggRoster*) override { return down(); }
  Status share_keys(const atoll_pb::v1::SecAggShares&, atoll_pb::v1::SecAggShares*) override { return down(); }
  Status await_unmask(const atoll_pb::v1::SecAggUnmaskPoll&, atoll_pb::v1::SecAggUnmaskTask*) override {
    return down();
  }
  Status reveal_shares(const atoll_pb::v1::SecAggReveal&, atoll_pb::v1::SecAggRevealAck*) override { return down(); }
  bool wait_for_link(std::chrono::milliseconds max_wait) override {
    if (link_up_after_) {
      const auto up_at = t0_ + *link_up_after_;
      if (std::chrono::steady_clock::now() + max_wait >= up_at) {
        std::this_thread::sleep_until(up_at);
        return true;
      }
    }
    std::this_thread::sleep_for(max_wait);
    return false;
  }

 private:
  static Status down() { return Unavailable("coordinator at test:1 not reachable (test)"); }
  const std::string target_ = "test:1";
  std::chrono::steady_clock::time_point t0_;
  std::optional<std::chrono::milliseconds> link_up_after_;
};

// 4096 token ids drawn uniformly from [0, vocab) with a fixed Philox stream: data of no text,
// for tests of the distillation student and teacher.
inline algorithms::data::TokenDataset random_tokens(int vocab) {
  Philox r(5, 3);
  std::vector<int32_t> t(4096);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(r.below(i, vocab));
  auto d = algorithms::data::dataset_from_tokens(std::move(t), vocab);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(d).value();
}

}  // namespace atl::node::testing
