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

namespace atl::cli {

namespace {
// Threads, not processes: bounded by memory (each site keeps its data, θ, θ_local and optimizer
// state), not by the 15 Brown genres (sites beyond 15 share genres, one each).
constexpr int64_t kMaxSimulatedSites = 4096;
}  // namespace

int cmd_simulate(const Args& args) {
  Args rest;
  const std::string algorithm = take_algorithm_flag(args, &rest);
  if (algorithm == "hydra") return hydra_command("simulate", rest, SiteMode::kInProcess);
  if (algorithm == "distill") return cmd_simulate_distill(rest);
  if (algorithm == "lora") return lora_command("simulate", rest, kMaxSimulatedSites, true);
  if (!algorithm.empty() && algorithm != "diloco")
    return fail("simulate", "--algorithm " + algorithm + " must be diloco, distill, hydra or lora",
                2);
  Flags flags("simulate", demo_experiment_flags(kMaxSimulatedSites));
  if (Status s = flags.parse(rest); !s.ok()) return fail("simulate", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  if (flags.has("insecure"))
    return fail("simulate", "--insecure has no meaning here: in-process sites use no network", 2);
  auto experiment = parse_demo_experiment(flags, kMaxSimulatedSites);
  if (!experiment.ok()) return fail("simulate", experiment.status().message(), 2);
  return run_demo_experiment("simulate", *experiment, SiteMode::kInProcess);
}

}  // namespace atl::cli
