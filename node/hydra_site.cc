#include "node/hydra_site.h"

#include "algorithms/hydra/importance.h"

namespace atl::node {

StatusOr<atoll_pb::v1::ImportanceReport> measure_importance(
    const algorithms::ModelConfig& model, const algorithms::ParamSet& theta,
    const algorithms::data::TokenDataset& train, uint64_t seed, uint64_t round, int batches, int B,
    int T, int ffn_blocks) {
  if (batches <= 0 || batches > 64)
    return InvalidArgument("importance_batches " + std::to_string(batches) + " must be in [1, 64]");
  std::vector<int32_t> rows;
  // Steps far from the training schedule's (which counts up from 0): a distinct stream.
  const int64_t base = (int64_t{1} << 40) + static_cast<int64_t>(round) * 64;
  for (int k = 0; k < batches; ++k) {
    auto b = algorithms::data::sample_global_batch(train, seed, base + k, B, T);
    rows.insert(rows.end(), b.tokens.begin(), b.tokens.end());
  }
  algorithms::Llama llama(model);
  ATOLL_ASSIGN_OR_RETURN(auto sc, algorithms::hydra::taylor_importance(llama, theta, rows.data(),
                                                                       batches, B, T, ffn_blocks));
  atoll_pb::v1::ImportanceReport r;
  r.set_round(round);
  r.set_batches(static_cast<uint32_t>(batches));
  for (double x : sc.layer) r.add_layer(x);
  for (double x : sc.head) r.add_head(x);
  for (double x : sc.ffn) r.add_ffn(x);
  return r;
}

void masked_delta(std::span<const float> theta, std::span<const float> local,
                  std::span<const uint32_t> idx, std::span<float> out) {
  for (size_t i = 0; i < idx.size(); ++i) out[i] = theta[idx[i]] - local[idx[i]];
}

}  // namespace atl::node
