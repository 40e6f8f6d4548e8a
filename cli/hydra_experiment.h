// The Hydra demo's experiment (issue 7), read from the flags that `atoll demo --algorithm hydra`
// and `atoll simulate --algorithm hydra` share: a base model trained briefly on the Brown genres
// no site holds (or the user's own, `--base CKPT`: an `atoll import hf` or `atoll train`
// checkpoint, whose model and tokenizer the experiment then uses), then Hydra rounds by four
// sites with budgets 1.0, 0.5, 0.25, 0.25 on genres a, f, j, n. The same flags give the same
// ExperimentConfig, base model and sites, so the two commands commit the same θ bit for bit (one
// runs node processes over mTLS gRPC, the other runs the sites in memory).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/optim/inner_trainer.h"
#include "cli/flags.h"
#include "cli/serve_after_done.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"
#include "node/base_model.h"
#include "node/kept_theta.h"

namespace atl::cli {

struct HydraDemoSite {
  std::string name;   // certificate name / identity ("site-a")
  std::string genre;  // the Brown genre it holds ("a"); its data spec is "brown:<genre>"
  double budget = 1.0;
};

struct HydraExperiment {
  coordinator::ExperimentConfig config;  // algorithm "hydra", 4 sites, FedAvg outer step
  std::vector<HydraDemoSite> sites;      // site-a 1.0, site-f 0.5, site-j 0.25, site-n 0.25
  std::string base_data_spec;            // the genres no site holds
  // --base: θ_0, the model and the sites' tokenizer (null: the base model is trained first).
  std::shared_ptr<const node::BaseModel> base;
  int64_t base_steps = 0;                  // steps of the base model (0: θ_0 = init_params)
  algorithms::TrainerConfig base_trainer;  // its AdamW schedule (batch and seq of the config)
  int64_t eval_tokens = 0;                 // validation targets per site evaluation
  int64_t threads = 1;                     // kernel threads per site
  std::string brown_dir;
  std::optional<std::string> store;                  // run directory (default: a fresh temp dir)
  std::string http;                                  // dashboard HOST:PORT, "off" = none
  bool insecure = false;                             // plaintext gRPC (processes only)
  node::KeepBest keep_best = node::KeepBest::kAuto;  // what every site keeps (--keep-best)
  AfterDone after;
};

// The flags (for Flags' constructor).
std::vector<FlagSpec> hydra_experiment_flags();

// Reads and checks the flags (InvalidArgument naming the flag when one is bad).
StatusOr<HydraExperiment> parse_hydra_experiment(const Flags& flags);

}  // namespace atl::cli
