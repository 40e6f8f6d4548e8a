#include "node/evaluate.h"

#include <cmath>
#include <cstdio>

namespace atl::node {

Evaluation evaluate_bpb(algorithms::Llama& model, const algorithms::ParamSet& params,
                        const algorithms::data::TokenDataset& validation,
                        const algorithms::data::Tokenizer& tokenizer, int T, int B,
                        int64_t max_tokens) {
  Evaluation e;
  // Validation measures the fp32 master weights in fp32, whatever the training precision.
  const bool enabled = model.gemm().enabled();
  model.gemm().set_enabled(false);
  auto batches = algorithms::data::evaluation_batches(validation, T, max_tokens, B);
  std::vector<int32_t> inputs, targets;
  double loss_sum = 0;
  int64_t bytes = 0;
  for (const auto& b : batches) {
    // Masked targets (prompt tokens) become -1: out of the loss, the count and the bytes.
    algorithms::data::split_inputs_targets(b.tokens.data(), b.B, T, inputs, targets);
    float loss = model.forward(params, inputs.data(), targets.data(), b.B, T);
    loss_sum += static_cast<double>(loss) * static_cast<double>(model.num_targets());
    e.tokens += model.num_targets();
    bytes += algorithms::data::target_bytes(b, tokenizer);
  }
  model.gemm().set_enabled(enabled);
  e.bytes_counted = validation.bytes_countable;
  if (e.tokens == 0) {
    e.bpb = e.loss = NAN;
    return e;
  }
  e.loss = loss_sum / static_cast<double>(e.tokens);
  // Token ids without their tokenizer stand for unknown text: counting the byte tokenizer's
  // bytes for them would give a finite, wrong figure.
  e.bpb = e.bytes_counted ? algorithms::data::bits_per_byte(e.loss, e.tokens, bytes) : NAN;
  return e;
}

std::string validation_figure(const Evaluation& e) {
  char line[160];
  if (e.bytes_counted)
    std::snprintf(line, sizeof(line), "val bpb %.4f", e.bpb);
  else
    std::snprintf(line, sizeof(line),
                  "val loss %.4f nats/token (no bits per byte: token ids without their "
                  "tokenizer)",
                  e.loss);
  return line;
}

}  // namespace atl::node
