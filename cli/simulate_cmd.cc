// `atoll simulate`: the demo's experiment with N virtual sites in this process. The same site
// worker and round engine as `atoll demo`, exchanging the same protobuf messages in memory
// instead of over mTLS gRPC, with the same RocksDB store and dashboard: same flags and seed ⇒
// the same committed θ, round by round, as the multi-process run (docs/architecture.md).
#include <cstdio>

#include "cli/commands.h"
#include "cli/demo_experiment.h"
#include "cli/demo_run.h"
#include "cli/flags.h"

namespace atl::cli {

namespace {
// Threads, not processes: bounded by memory (each site keeps its data, θ, θ_local and optimizer
// state), not by the 15 Brown genres (sites beyond 15 share genres, one each).
constexpr int64_t kMaxSimulatedSites = 4096;

// `--algorithm distill` (or --algorithm=distill): the distillation demo's experiment, which has
// its own flags (cli/demo_distill.cc). The other arguments go to *rest.
bool distill_requested(const Args& args, Args* rest) {
  bool distill = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--algorithm" && i + 1 < args.size() && args[i + 1] == "distill") {
      distill = true;
      ++i;
    } else if (args[i] == "--algorithm=distill") {
      distill = true;
    } else {
      rest->push_back(args[i]);
    }
  }
  return distill;
}
}  // namespace

int cmd_simulate(const Args& args) {
  if (Args rest; distill_requested(args, &rest)) return cmd_simulate_distill(rest);
  Flags flags("simulate", demo_experiment_flags(kMaxSimulatedSites));
  if (Status s = flags.parse(args); !s.ok()) return fail("simulate", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  if (const std::string a = flags.get_or("algorithm", "diloco"); a != "diloco")
    return fail("simulate",
                "--algorithm " + a + ": simulate runs diloco (and Streaming DiLoCo with "
                "--fragments/--overlap) for now; use `atoll demo --algorithm " + a + "`",
                2);
  if (flags.has("insecure"))
    return fail("simulate", "--insecure has no meaning here: in-process sites use no network", 2);
  auto experiment = parse_demo_experiment(flags, kMaxSimulatedSites);
  if (!experiment.ok()) return fail("simulate", experiment.status().message(), 2);
  return run_demo_experiment("simulate", *experiment, SiteMode::kInProcess);
}

}  // namespace atl::cli
