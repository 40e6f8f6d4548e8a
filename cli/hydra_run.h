// Runs the Hydra demo's experiment (cli/hydra_experiment.h) with its sites either as node
// processes over mTLS gRPC (`atoll demo --algorithm hydra`) or in this process (`atoll simulate
// --algorithm hydra`): the base model, the embedded coordinator, the dashboard and the per-round
// lines (each site's subnetwork, its FLOPs and its validation bpb on its own genre) are the
// same, and so is every committed θ.
#pragma once

#include <string>

#include "cli/commands.h"
#include "cli/demo_run.h"  // SiteMode
#include "cli/hydra_experiment.h"

namespace atl::cli {

// Returns the command's exit code (0 done, 1 failure, 2 bad usage, 130 interrupted).
int run_hydra_experiment(const std::string& command, const HydraExperiment& experiment,
                         SiteMode mode);

// Parses `args` (the Hydra demo's flags, --algorithm already taken out) and runs the
// experiment: `atoll demo --algorithm hydra` with kProcesses, `atoll simulate --algorithm hydra`
// with kInProcess (which refuses --insecure: in-process sites use no network).
int hydra_command(const std::string& command, const Args& args, SiteMode mode);

}  // namespace atl::cli
