// Shared by the Hydra tests.
#pragma once

#include "algorithms/hydra/cost.h"

namespace atl::algorithms::hydra {

// The cost model of the Hydra bench and demo model: C 64, L 4, H 4, F 192 in 4 blocks, T 64.
inline CostModel bench_cost() {
  CostModel cm;
  cm.model.vocab = 256;
  cm.model.dim = 64;
  cm.model.layers = 4;
  cm.model.heads = 4;
  cm.model.ffn_hidden = 192;
  cm.model.seq_len = 64;
  cm.ffn_blocks = 4;
  cm.seq = 64;
  return cm;
}

// A small model for the subnetwork and trainer tests: C 32, L 3, H 4, F 48, T 16, vocab 64.
inline ModelConfig small_subnet_model() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 3;
  c.heads = 4;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  return c;
}

}  // namespace atl::algorithms::hydra
