// `atoll simulate`: the demo's experiment with N virtual sites in this process. The same site
// worker and round engine as `atoll demo`, exchanging the same protobuf messages in memory
// instead of over mTLS gRPC, with the same RocksDB store and dashboard: same flags and seed ⇒
// the same committed θ, round by round, as the multi-process run (docs/architecture.md).
// `--algorithm hydra` and `--algorithm distill` run those demos' experiments the same way.
#include <cstdio>

#include "cli/commands.h"
#include "cli/demo_experiment.h"
#include "cli/demo_run.h"
#include "cli/flags.h"
#include "cli/hydra_run.h"
#include "simulate/byzantine.h"

namespace atl::cli {

namespace {
// Threads, not processes: bounded by memory (each site keeps its data, θ, θ_local and optimizer
// state), not by the 15 Brown genres (sites beyond 15 share genres, one each).
constexpr int64_t kMaxSimulatedSites = 4096;

std::vector<FlagSpec> simulate_flags() {
  std::vector<FlagSpec> specs = demo_experiment_flags(kMaxSimulatedSites);
  specs.push_back({"byzantine", true,
                   "the last K sites are Byzantine: they train, then attack what they push", "0"});
  specs.push_back({"attack", true, "what the Byzantine sites do: " + simulate::attack_names(), ""});
  refuse_flag(specs, "insecure", kInsecureInProcess);
  return specs;
}

// --byzantine K --attack NAME into d (simulate/byzantine.h).
Status read_byzantine_flags(const Flags& flags, DemoExperiment& d) {
  const auto sites = static_cast<int64_t>(d.site_names.size());
  ATOLL_ASSIGN_OR_RETURN(d.byzantine, flags.get_int("byzantine", 0, 0, sites));
  const std::optional<std::string> attack = flags.get("attack");
  if (d.byzantine == 0) {
    if (attack)
      return InvalidArgument("--attack " + attack->substr(0, 64) +
                             " needs --byzantine K > 0: the number of sites that attack");
    return Status::Ok();
  }
  if (!attack)
    return InvalidArgument("--byzantine " + std::to_string(d.byzantine) +
                           " needs --attack NAME, one of " + simulate::attack_names());
  ATOLL_ASSIGN_OR_RETURN(d.attack, simulate::parse_attack(*attack));
  return Status::Ok();
}
}  // namespace

int cmd_simulate(const Args& args) {
  Args rest;
  const std::string algorithm = take_algorithm_flag(args, &rest);
  if (algorithm == "hydra") return hydra_command("simulate", rest, SiteMode::kInProcess);
  if (algorithm == "distill") return cmd_simulate_distill(rest);
  if (algorithm == "lora") return lora_command("simulate", rest, kMaxSimulatedSites, true);
  if (algorithm != "diloco")
    return fail("simulate",
                "--algorithm '" + algorithm + "' must be diloco, distill, hydra or lora", 2);
  Flags flags("simulate", simulate_flags());
  if (Status s = flags.parse(rest); !s.ok()) return fail("simulate", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto experiment = parse_demo_experiment(flags, kMaxSimulatedSites);
  if (!experiment.ok()) return fail("simulate", experiment.status().message(), 2);
  if (Status s = read_byzantine_flags(flags, *experiment); !s.ok())
    return fail("simulate", s.message(), 2);
  return run_demo_experiment("simulate", *experiment, SiteMode::kInProcess);
}

}  // namespace atl::cli
