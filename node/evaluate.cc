#include "node/evaluate.h"

#include <cmath>

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
    inputs.resize(static_cast<size_t>(b.B) * T);
    targets.resize(inputs.size());
    for (int r = 0; r < b.B; ++r) {
      auto row = b.row(r);
      std::copy(row.begin(), row.begin() + T, inputs.begin() + static_cast<ptrdiff_t>(r) * T);
      std::copy(row.begin() + 1, row.end(), targets.begin() + static_cast<ptrdiff_t>(r) * T);
    }
    float loss = model.forward(params, inputs.data(), targets.data(), b.B, T);
    loss_sum += static_cast<double>(loss) * b.B * T;
    e.tokens += static_cast<int64_t>(b.B) * T;
    bytes += algorithms::data::target_bytes(b, tokenizer);
  }
  model.gemm().set_enabled(enabled);
  if (e.tokens == 0) {
    e.bpb = e.loss = NAN;
    return e;
  }
  e.loss = loss_sum / static_cast<double>(e.tokens);
  e.bpb = algorithms::data::bits_per_byte(e.loss, e.tokens, bytes);
  return e;
}

}  // namespace atl::node
