// What a site trains, read from the coordinator's JoinResponse: the model, the inner optimizer
// (with the experiment's precision recipe and this site's random streams), the site's data seed,
// and the rest of the experiment's TrainSpec (algorithm, codec, Streaming DiLoCo, Hydra).
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

// The data-sampling seed of a site: each site draws its own batches from its own data, keyed by
// the experiment seed and its node id (not its join order), so a restarted node, or the
// data-parallel baseline that emulates it, sees the same batches for the same global steps.
uint64_t site_seed(uint64_t experiment_seed, const std::string& node_id);

struct SiteConfig {
  algorithms::ModelConfig model;
  algorithms::TrainerConfig train;  // precision parsed; precision_seed = seed
  uint64_t seed = 0;                // site_seed(experiment seed, node id)
  atoll_pb::v1::TrainSpec spec;     // as the coordinator sent it
  // A LoRA experiment (rank > 0): θ is the adapter set over the frozen base whose parameters
  // have this SHA-256 fingerprint (the node loads it with --base).
  algorithms::LoraConfig lora;
  std::string base_fingerprint;

  bool lora_enabled() const { return algorithms::lora_enabled(lora); }

  bool hydra() const { return spec.algorithm() == "hydra"; }
  // Streaming DiLoCo: fragments P > 1 or overlapped inner steps τ > 0.
  bool streaming() const { return spec.streaming_fragments() > 1 || spec.overlap_steps() > 0; }
};

algorithms::ModelConfig model_from_spec(const atoll_pb::v1::ModelSpec& m);

// θ's layout: the adapters' (make_lora_layout) in a LoRA experiment, else the model's.
algorithms::ParamLayout theta_layout(const SiteConfig& site);

// Validates the model and trainer configs (one line naming the first bad field).
StatusOr<SiteConfig> site_config_from_join(const atoll_pb::v1::JoinResponse& joined);

}  // namespace atl::node
