// `atoll demo` (= `make demo`): Atoll's main job on one machine. An embedded coordinator with a
// fresh dev CA, N node processes over mTLS gRPC, each site holding different Brown genres
// (non-IID), DiLoCo for R rounds × H inner steps, progress per round and a summary
// (cli/demo_run.h; `atoll simulate` runs the same experiment with in-process sites).
#include <cstdio>

#include "cli/commands.h"
#include "cli/demo_experiment.h"
#include "cli/demo_run.h"
#include "cli/flags.h"

namespace atl::cli {

namespace {

// Node processes are one per site on this machine: the demo keeps to the 15 Brown genres.
constexpr int64_t kMaxDemoSites = 15;

int cmd_demo_diloco(const Args& args) {
  Flags flags("demo", demo_experiment_flags(kMaxDemoSites));
  if (Status s = flags.parse(args); !s.ok()) return fail("demo", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto experiment = parse_demo_experiment(flags, kMaxDemoSites);
  if (!experiment.ok()) return fail("demo", experiment.status().message(), 2);
  return run_demo_experiment("demo", *experiment, SiteMode::kProcesses);
}

}  // namespace

int cmd_demo(const Args& args) {
  Args rest;
  const std::string algorithm = take_algorithm_flag(args, &rest);
  if (algorithm == "distill") return cmd_demo_distill(rest);
  if (algorithm == "hydra") return demo_hydra(rest);  // cli/demo_hydra.cc
  if (algorithm == "lora") return lora_command("demo", rest, kMaxDemoSites, false);
  if (algorithm != "diloco")
    return fail("demo", "--algorithm '" + algorithm + "' must be diloco, distill, hydra or lora",
                2);
  return cmd_demo_diloco(rest);
}

}  // namespace atl::cli
