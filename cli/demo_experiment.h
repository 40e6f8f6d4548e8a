// The DiLoCo demo's experiment, read from the flags that `atoll demo` and `atoll simulate` share:
// the same flags give the same ExperimentConfig, the same site names and the same data splits,
// so the two commands commit the same θ bit for bit (one runs node processes over mTLS gRPC,
// the other runs the sites in memory).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/serve_after_done.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"
#include "node/kept_theta.h"
#include "simulate/byzantine.h"

namespace atl::cli {

// The source named when an experiment built from flags fails the config's checks: their messages
// name config keys (docs/configuration.md says which flag sets which).
inline constexpr const char* kFlagsAsConfig = "flags (as config keys)";

struct DemoExperiment {
  coordinator::ExperimentConfig config;
  std::vector<std::string> site_names;  // "node-1" … "node-N" (certificate names)
  std::vector<std::string> site_data;   // one data spec per site ("brown:a,b" or "brown")
  int64_t rounds = 0;                   // outer rounds R (Streaming: R·P syncs in the config)
  int64_t inner_steps = 0;              // H
  int64_t threads = 1;                  // kernel threads per site
  int64_t eval_tokens = 0;              // validation targets per evaluation
  std::string brown_dir;
  std::optional<std::string> store;         // run directory (default: a fresh temp dir)
  std::optional<std::string> init_from;     // warm-start checkpoint
  std::optional<std::string> summary_json;  // where to write the summary
  std::optional<std::string> out;           // where to write the final checkpoint
  std::string http;                         // dashboard HOST:PORT, "off" = none
  bool bulk_lane = true;                    // the coordinator offers its bulk lane (TLS only)
  bool insecure = false;                    // plaintext gRPC (processes only)
  // --site-states: each site's round states in <run dir>/site-states/<site> (a node's
  // --state-dir), so that a run restarted on its store resumes bit for bit.
  bool site_states = false;
  bool baseline = false;                    // also train the data-parallel equivalent
  node::KeepBest keep_best = node::KeepBest::kAuto;  // what every site keeps (--keep-best)
  // `atoll simulate` only: the last `byzantine` sites attack what they push (simulate/byzantine.h).
  int64_t byzantine = 0;
  simulate::Attack attack = simulate::Attack::kNone;
  AfterDone after;
  // LoRA (`--algorithm lora`, config.lora set): without --base (lora.base empty) the demo first
  // pretrains its base for this many steps on Brown's training documents (cli/demo_lora.cc).
  int64_t base_steps = 0;
};

// `--algorithm NAME` (or --algorithm=NAME) in `args`: NAME, "diloco" when absent; every other
// argument goes to *rest (each algorithm's demo has its own flags).
std::string take_algorithm_flag(const std::vector<std::string>& args,
                                std::vector<std::string>* rest);

// The flags (for Flags' constructor); `max_sites` bounds --nodes.
std::vector<FlagSpec> demo_experiment_flags(int64_t max_sites);

// Reads and checks the flags (InvalidArgument naming the flag when one is bad).
StatusOr<DemoExperiment> parse_demo_experiment(const Flags& flags, int64_t max_sites);

// With --base the model is the checkpoint's: the one line refusing the first of `model_flags`
// that `given` says was on the command line (--algorithm hydra and lora).
Status refuse_model_flags_with_base(const std::function<bool(const char*)>& given,
                                    std::initializer_list<const char*> model_flags);

// `--algorithm lora` (cli/demo_lora.cc): the DiLoCo demo's flags plus the LoRA ones (--base,
// --lora-rank, --lora-alpha, --lora-targets, --base-steps).
std::vector<FlagSpec> lora_demo_flags(int64_t max_sites);
// parse_demo_experiment, then the [lora] section from the LoRA flags.
StatusOr<DemoExperiment> parse_lora_demo_experiment(const Flags& flags, int64_t max_sites);
// `atoll demo|simulate --algorithm lora`: federated LoRA fine-tuning of a base at every site.
int lora_command(const std::string& command, const std::vector<std::string>& args,
                 int64_t max_sites, bool in_process);
// The LoRA demo's default base: the demo's model trained for d.base_steps steps on Brown's
// training documents (held-out ones stay out: they are the evaluation), written to
// <run_dir>/base.safetensors. Returns its path.
StatusOr<std::string> pretrain_demo_base(const DemoExperiment& d, const std::string& run_dir);

}  // namespace atl::cli
