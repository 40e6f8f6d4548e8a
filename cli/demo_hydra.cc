// `atoll demo --algorithm hydra`: fine-tuning with heterogeneous sites (issue 7). A base model
// is trained briefly on Brown genres the sites do not hold; then a coordinator (mTLS) and four
// `atoll node` processes with budgets 1.0, 0.5, 0.25, 0.25 on genres a, f, j, n run Hydra
// rounds: importance, selection, masked training and aggregation. Prints each site's
// subnetwork and its validation bpb on its own genre after every round. The experiment is
// cli/hydra_experiment.h, its run cli/hydra_run.h (`atoll simulate --algorithm hydra` runs the
// same sites in this process).

#include "cli/commands.h"
#include "cli/hydra_run.h"

namespace atl::cli {

int demo_hydra(const Args& args) { return hydra_command("demo", args, SiteMode::kProcesses); }

}  // namespace atl::cli
