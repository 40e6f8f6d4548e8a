// Node side of Hydra (docs/hydra.md): importance measurement for a SCORE task and the masked
// pseudo-gradient of a TRAIN task. The training itself is algorithms/hydra/trainer.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

// Taylor importance of θ on `batches` batches (B rows of T + 1 tokens) of the site's training
// data, drawn with (seed, round) so a re-sent SCORE task measures the same batches. Scores only:
// no token leaves the site.
StatusOr<atoll_pb::v1::ImportanceReport> measure_importance(
    const algorithms::ModelConfig& model, const algorithms::ParamSet& theta,
    const algorithms::data::TokenDataset& train, uint64_t seed, uint64_t round, int batches, int B,
    int T, int ffn_blocks);

// Δ at the held elements: out[i] = theta[idx[i]] − local[idx[i]] (out has idx.size()).
void masked_delta(std::span<const float> theta, std::span<const float> local,
                  std::span<const uint32_t> idx, std::span<float> out);

}  // namespace atl::node
