// Shared by the Hydra selection tests.
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

}  // namespace atl::algorithms::hydra
