// Runs the DiLoCo demo's experiment (cli/demo_experiment.h) with its sites either as node
// processes over mTLS gRPC (`atoll demo`) or in this process (`atoll simulate`): the embedded
// coordinator, the dashboard, the per-round progress (validation bpb, losses, bytes, ETA) and
// the summary are the same, and so is every committed θ.
#pragma once

#include <string>

#include "cli/demo_experiment.h"
#include "cli/demo_sites.h"  // SiteMode

namespace atl::cli {

// Returns the command's exit code (0 done, 1 failure, 2 bad usage, 130 interrupted).
int run_demo_experiment(const std::string& command, const DemoExperiment& experiment,
                        SiteMode mode);

}  // namespace atl::cli
