// Shared pieces of the CUDA model tests (llama_cuda_test.cc, llama_cuda_precision_test.cc): the
// small model and trainer configs, token batches with something to learn, and a per-tensor
// comparison of two ParamSets.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/inner_trainer.h"

namespace atl::algorithms::cuda::testing {

inline ModelConfig small_model() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 64;
  c.seq_len = 16;
  return c;
}

inline TrainerConfig small_trainer(int batch) {
  TrainerConfig t;
  t.batch = batch;
  t.seq = 16;
  t.lr = 1e-2;  // the CPU trainer drops ~0.7 nats in 20 steps on make_tokens' batches
  t.min_lr = 1e-3;
  t.warmup = 2;
  t.total_steps = 20;
  return t;
}

// (rows, seq + 1) tokens with structure to learn (a noisy arithmetic progression per row), a
// pure function of (seed, rows).
inline std::vector<int32_t> make_tokens(int rows, int seq, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(rows) * (seq + 1));
  for (int r = 0; r < rows; ++r) {
    const int step = 1 + static_cast<int>(g() % 5), start = static_cast<int>(g() % vocab);
    for (int i = 0; i <= seq; ++i) {
      const bool noise = g() % 8 == 0;
      t[size_t(r) * (seq + 1) + i] =
          noise ? static_cast<int32_t>(g() % vocab) : (start + step * i) % vocab;
    }
  }
  return t;
}

// Per view: max |a − b| <= rel · max |b| (+ a tiny floor for all-zero views).
inline ::testing::AssertionResult views_close(const ParamSet& a, const ParamSet& b, double rel) {
  for (const ParamView& v : b.layout().views()) {
    const float* pa = a.data() + v.offset;
    const float* pb = b.data() + v.offset;
    double scale = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < v.numel(); ++i) scale = std::max(scale, std::abs(double(pb[i])));
    for (size_t i = 0; i < v.numel(); ++i) {
      const double e = std::abs(double(pa[i]) - double(pb[i]));
      if (!(e <= worst)) worst = e, wi = i;
    }
    if (!(worst <= rel * scale + 1e-12))
      return ::testing::AssertionFailure()
             << v.name << "[" << wi << "]: " << pa[wi] << " vs " << pb[wi] << " (|diff| " << worst
             << " > " << rel << " x max " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

// A model that mixes dense and MoE layers: layer l is MoE when (l + 1) % every == 0.
inline ModelConfig moe_model(const char* score, int shared_hidden, int every) {
  ModelConfig c = small_model();
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 16;
  c.moe_every = every;
  c.moe_score = score;
  c.moe_shared_hidden = shared_hidden;
  return c;
}

}  // namespace atl::algorithms::cuda::testing
