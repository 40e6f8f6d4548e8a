// `atoll demo --algorithm lora` and `atoll simulate --algorithm lora`: federated LoRA
// fine-tuning (docs/federated-finetuning.md). The DiLoCo demo's experiment with a [lora]
// section: every site fine-tunes adapters over the same frozen base on its own Brown genres, and
// only the adapters travel. The base is --base CKPT (an `atoll import hf` or `atoll train`
// checkpoint), or by default the demo's model pretrained for --base-steps steps first.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/model/llama.h"
#include "cli/commands.h"
#include "cli/demo_experiment.h"
#include "cli/demo_run.h"
#include "cli/signals.h"
#include "node/checkpoint.h"
#include "node/site_data.h"
#include "simulate/train_on_data.h"

namespace atl::cli {

namespace {

// The default base is pretrained in the demo's first seconds, so the model and the run are
// smaller than the DiLoCo demo's (with --base the model is the base's; only --seq applies): the
// whole default run takes about a minute on 2 cores.
const std::vector<std::pair<std::string, std::string>> kLoraDefaults = {
    {"dim", "64"}, {"layers", "2"}, {"ffn", "192"},
    {"seq", "64"}, {"rounds", "6"}, {"inner-steps", "20"}};

bool has_flag(const std::vector<std::string>& args, const std::string& name) {
  for (const auto& a : args)
    if (a == "--" + name || a.rfind("--" + name + "=", 0) == 0) return true;
  return false;
}

}  // namespace

std::vector<FlagSpec> lora_demo_flags(int64_t max_sites) {
  std::vector<FlagSpec> f = demo_experiment_flags(max_sites);
  f[0] = {"algorithm", true, "lora (this demo), diloco, distill or hydra", "lora"};
  for (FlagSpec& s : f)
    for (const auto& [name, value] : kLoraDefaults)
      if (s.name == name) s.default_text = value;
  f.push_back({"base", true,
               "the base checkpoint to fine-tune (atoll import hf / atoll train); default: the "
               "demo's model pretrained first for --base-steps steps",
               ""});
  f.push_back({"base-steps", true, "steps of the default base's pretraining", "150"});
  f.push_back({"lora-rank", true, "LoRA rank r", "8"});
  f.push_back({"lora-base-dtype", true,
               "how every site holds the frozen base: fp32, or bf16 (half the memory; the base "
               "rounded to bf16 once)",
               "fp32"});
  f.push_back({"lora-alpha", true, "LoRA alpha (the update is scaled by alpha / r)", "16"});
  f.push_back(
      {"lora-targets", true, "projections with adapters: any of q,k,v,o,gate,up,down", "q,k,v,o"});
  refuse_flag(f, "config",
              "--config runs DiLoCo and Streaming DiLoCo experiment files; --algorithm lora takes "
              "its flags (or run the file with atoll coordinator --config and atoll node --base)");
  refuse_flag(f, "baseline", "--baseline trains the full model: it has no LoRA equivalent here");
  refuse_flag(f, "init-from",
              "--init-from: a LoRA run starts from fresh adapters; use --base CKPT");
  return f;
}

StatusOr<DemoExperiment> parse_lora_demo_experiment(const Flags& flags, int64_t max_sites) {
  ATOLL_ASSIGN_OR_RETURN(DemoExperiment d, parse_demo_experiment(flags, max_sites));
  ATOLL_ASSIGN_OR_RETURN(const int64_t rank, flags.get_int("lora-rank", 8, 1, 4096));
  ATOLL_ASSIGN_OR_RETURN(d.config.lora.alpha,
                         flags.get_double("lora-alpha", 16.0, 0, 1e9, /*min_open=*/true));
  ATOLL_ASSIGN_OR_RETURN(d.base_steps, flags.get_int("base-steps", 150, 1, 1000000));
  const std::string targets = flags.get_or("lora-targets", "q,k,v,o");
  auto parsed = algorithms::parse_lora_targets(targets);
  if (!parsed.ok()) return InvalidArgument("--lora-targets: " + parsed.status().message());
  d.config.lora.rank = static_cast<uint32_t>(rank);
  d.config.lora.targets = targets;
  d.config.lora.base_dtype = flags.get_or("lora-base-dtype", "fp32");
  if (auto storage = algorithms::parse_base_storage(d.config.lora.base_dtype); !storage.ok())
    return InvalidArgument("--lora-base-dtype: " + storage.status().message());
  // The config needs a base to validate; the default one is written into the run directory.
  d.config.lora.base = flags.get_or("base", "");
  if (flags.has("base")) {
    ATOLL_RETURN_IF_ERROR(coordinator::validate_experiment_config(d.config, kFlagsAsConfig));
  } else {
    coordinator::ExperimentConfig check = d.config;
    check.lora.base = "base.safetensors";
    ATOLL_RETURN_IF_ERROR(coordinator::validate_experiment_config(check, kFlagsAsConfig));
  }
  return d;
}

int lora_command(const std::string& command, const std::vector<std::string>& args,
                 int64_t max_sites, bool in_process) {
  std::vector<FlagSpec> specs = lora_demo_flags(max_sites);
  if (in_process) refuse_flag(specs, "insecure", kInsecureInProcess);
  Flags flags(command, std::move(specs));
  std::vector<std::string> with_defaults = args;
  for (const auto& [name, value] : kLoraDefaults)
    if (!has_flag(args, name)) with_defaults.insert(with_defaults.end(), {"--" + name, value});
  if (Status s = flags.parse(with_defaults); !s.ok()) return fail(command, s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  // The user's own flags (kLoraDefaults are given for them otherwise); --seq still applies.
  if (has_flag(args, "base"))
    if (Status s =
            refuse_model_flags_with_base([&args](const char* f) { return has_flag(args, f); },
                                         {"dim", "layers", "heads", "ffn", "base-steps"});
        !s.ok())
      return fail(command, s.message(), 2);
  auto experiment = parse_lora_demo_experiment(flags, max_sites);
  if (!experiment.ok()) return fail(command, experiment.status().message(), 2);
  return run_demo_experiment(command, *experiment,
                             in_process ? SiteMode::kInProcess : SiteMode::kProcesses);
}

StatusOr<std::string> pretrain_demo_base(const DemoExperiment& d, const std::string& run_dir) {
  const algorithms::ModelConfig model = coordinator::model_config(d.config);
  ATOLL_ASSIGN_OR_RETURN(node::DataSpec spec, node::parse_data_spec("brown"));
  ATOLL_ASSIGN_OR_RETURN(node::SiteData data,
                         node::load_site_data(spec, node::TokenizerChoice{}, d.brown_dir));
  algorithms::ParamSet params(algorithms::make_layout(model));
  algorithms::init_params(params, model, d.config.seed);
  algorithms::TrainerConfig tc = coordinator::trainer_config(d.config, d.base_steps);
  tc.warmup = std::min<int64_t>(20, d.base_steps);
  algorithms::InnerTrainer trainer(model, tc);
  std::printf("base: pretraining the demo model (%s parameters) on Brown for %" PRId64 " steps\n",
              std::to_string(params.numel()).c_str(), d.base_steps);
  std::fflush(stdout);
  simulate::TrainOnDataOptions o;
  o.data_seed = d.config.seed;
  o.end_step = d.base_steps;
  o.after_step = [&d](const simulate::TrainedStep& t) {
    if ((t.step + 1) % 50 == 0 || t.step + 1 == d.base_steps) {
      std::printf("  base step %" PRId64 " loss %.4f\n", t.step + 1, t.stats->loss);
      std::fflush(stdout);
    }
    return Status::Ok();
  };
  o.stop = install_stop_signals();
  ATOLL_RETURN_IF_ERROR(simulate::train_on_data(trainer, params, data.train, o));
  node::CheckpointMeta meta;
  meta.model = model;
  meta.step = d.base_steps;
  meta.seed = d.config.seed;
  const std::string path = run_dir + "/base.safetensors";
  ATOLL_RETURN_IF_ERROR(node::save_checkpoint(path, meta, params, nullptr));
  return path;
}

}  // namespace atl::cli
