// Helpers shared by the coordinator tests: temp dirs, a small parameter layout, conditions
// waited on with deadlines.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/model/param_set.h"
#include "coordinator/experiment_config.h"
#include "tools/temp_dir.h"

namespace atl::testing_util {

using testing::TempDir;

// Two views, `numel` elements in total (≥ 2), deterministic values.
inline algorithms::ParamSet toy_params(size_t numel, float scale = 1.0f) {
  algorithms::ParamLayout layout;
  const int64_t first = static_cast<int64_t>(numel / 2);
  layout.add("a.weight", {first});
  layout.add("b.weight", {static_cast<int64_t>(numel) - first});
  algorithms::ParamSet p(layout);
  for (size_t j = 0; j < numel; ++j)
    p.data()[j] = scale * static_cast<float>(static_cast<int>(j % 97) - 48) / 64.0f;
  return p;
}

// Polls `cond` (cheap, thread-safe) until true or the deadline; returns its last value. Used
// only where no notification exists (e.g. another process's progress).
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// A small experiment for coordinator tests: 10 inner steps, up to 8 nodes, 20 s deadlines,
// nodes lost after 4 silent half-second heartbeats.
inline coordinator::ExperimentConfig small_config(const std::string& name, uint32_t rounds,
                                                  uint32_t min_nodes) {
  coordinator::ExperimentConfig c;
  c.name = name;
  c.diloco.rounds = rounds;
  c.diloco.inner_steps = 10;
  c.diloco.min_nodes = min_nodes;
  c.diloco.max_nodes = 8;
  c.diloco.round_deadline_s = 20;
  c.diloco.heartbeat_interval_s = 0.5;
  c.diloco.lost_after_heartbeats = 4;
  c.diloco.start_wait_s = 0.5;
  // The tests' synthetic updates (a fixed pattern per node, plus 0.05 θ) repeat themselves:
  // cosine > 0.9995 between rounds, so replay detection would drop them. Tests of it turn it on.
  c.robust.replay_cosine = 0;
  // Nor are they a training run whose updates follow θ's trajectory: stale-update detection
  // compares directions across rounds, which unrelated random updates do not have. Tests of it
  // turn it on.
  c.robust.stale_margin = 0;
  return c;
}

// small_config as a Hydra experiment of 3-site tests (budgets 1, 0.5, 0.25): d = 32, 2 layers of
// 2 heads, FFN 128 in 2 blocks. 128, not 64: the cheapest subnetwork that trains anything (the
// output head and one head unit) must fit the 0.25 budget; at 64 it costs 0.26 of the full model
// and joins are refused. Batch 32: 10 steps × 32 × 16 = 5120 tokens a round allow the fake
// nodes' claims (up to 3000).
inline coordinator::ExperimentConfig small_hydra_config(const std::string& name, uint32_t rounds,
                                                        uint32_t min_nodes) {
  coordinator::ExperimentConfig c = small_config(name, rounds, min_nodes);
  c.algorithm = "hydra";
  c.model.vocab = 256;
  c.model.dim = 32;
  c.model.layers = 2;
  c.model.heads = 2;
  c.model.ffn_hidden = 128;
  c.model.seq_len = 16;
  c.train.batch_size = 32;
  c.hydra.ffn_blocks = 2;
  return c;
}

// small_config with secure aggregation on (threshold 2, clip range 0.5, quantization range 2^20,
// screening off as [secagg] requires); `masking = false` runs the same integers in the clear.
inline coordinator::ExperimentConfig secagg_test_config(const std::string& name, uint32_t rounds,
                                                        uint32_t min_nodes, bool masking) {
  coordinator::ExperimentConfig cfg = small_config(name, rounds, min_nodes);
  cfg.diloco.round_deadline_s = 30;
  cfg.diloco.lost_after_heartbeats = 20;
  cfg.robust.screen = "off";
  cfg.secagg.enabled = true;
  cfg.secagg.clip_range = 0.5;
  cfg.secagg.quantization_range = 1u << 20;
  cfg.secagg.threshold = 2;
  cfg.secagg.masking = masking;
  return cfg;
}

// n values drawn from N(0, 1) by std::mt19937(seed).
inline std::vector<float> normal_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace atl::testing_util
