// Validation of a model in bits per byte: the cross-entropy over fixed, non-overlapping
// windows of a validation set, converted with the bytes the target tokens stand for.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/data/dataset.h"
#include "algorithms/data/tokenizer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"

namespace atl::node {

struct Evaluation {
  double bpb = 0;        // bits per byte (NaN when !bytes_counted)
  double loss = 0;       // mean nats per token
  int64_t tokens = 0;    // targets evaluated
  // False for token ids without their tokenizer (TokenDataset::bytes_countable): no bpb.
  bool bytes_counted = true;
};

// "val bpb 4.1234", or "val loss 3.2100 nats/token (...)" where no bytes were counted.
std::string validation_figure(const Evaluation& e);

// Windows of T+1 tokens (see algorithms::data::evaluation_batches), at most max_tokens targets
// (0 = all), B rows per forward pass. Deterministic.
Evaluation evaluate_bpb(algorithms::Llama& model, const algorithms::ParamSet& params,
                        const algorithms::data::TokenDataset& validation,
                        const algorithms::data::Tokenizer& tokenizer, int T, int B,
                        int64_t max_tokens);

}  // namespace atl::node
