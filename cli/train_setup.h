// What `atoll train` and `atoll bench train` share: model/optimizer/data flags, merged over an
// optional TOML config (defaults < config file < flags; a resumed checkpoint fixes the model,
// seed and tokenizer).
#pragma once

#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "cli/flags.h"
#include "coordinator/experiment_config.h"
#include "node/checkpoint.h"
#include "node/site_data.h"

namespace atl::cli {

std::vector<FlagSpec> common_model_flags();

struct TrainSetup {
  algorithms::ModelConfig model;
  algorithms::TrainerConfig trainer;
  uint64_t seed = 1234;
  int threads = 0;
  node::SiteData site;
  std::string data_spec;
  std::string tokenizer_name;
  std::string trainer_summary;  // one line with the optimizer settings (checkpoint metadata)
};

// total_steps sets the cosine schedule's length. A resumed checkpoint fixes the model, seed and
// tokenizer; a base checkpoint (fine-tuning, --base) fixes the model and tokenizer only.
StatusOr<TrainSetup> make_train_setup(const Flags& flags, const node::LoadedCheckpoint* resumed,
                                      int64_t total_steps,
                                      const node::LoadedCheckpoint* base = nullptr);

// Model and optimizer from defaults, the config file (if --config) and flags, without data.
// `file_config`, when given, receives the config read (the defaults without --config).
Status apply_model_flags(const Flags& flags, algorithms::ModelConfig& model,
                         algorithms::TrainerConfig& trainer, uint64_t& seed, int& threads,
                         coordinator::ExperimentConfig* file_config = nullptr);

}  // namespace atl::cli
