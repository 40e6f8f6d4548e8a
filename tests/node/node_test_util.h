// Shared by the node tests: the JoinResponse of a small experiment, and θ-like values.
#pragma once

#include <string>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/philox.h"
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

}  // namespace atl::node::testing
