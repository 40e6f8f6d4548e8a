// Starting a coordinator (store + service + gRPC server) from an experiment config: shared by
// `atoll coordinator` and the coordinator embedded in `atoll demo`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/experiment_config.h"
#include "coordinator/experiment_manager.h"
#include "coordinator/http/server.h"
#include "coordinator/router.h"
#include "coordinator/server.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "node/base_model.h"
#include "transport/metrics/http_exporter.h"
#include "transport/tls/handshake_log.h"
#include "transport/tls/revocation.h"

namespace atl::cli {

algorithms::ModelConfig model_config_of(const coordinator::ExperimentConfig& cfg);

// The demos' byte-level model and inner optimizer: vocabulary 256, the given shape, batch and
// peak learning rate, decaying to lr / 10.
struct DemoModel {
  int64_t dim, layers, heads, ffn, seq, batch;
  double lr;
};
void set_demo_model(coordinator::ExperimentConfig& cfg, const DemoModel& m);

// The 15 Brown genres split into n contiguous groups, as data specs ("brown:a,b,c"), so the
// demos' sites hold different kinds of text (non-IID). With more than 15 sites, each site gets
// one genre, in turn.
std::vector<std::string> brown_genre_splits(int n);

// A demo's run directory: `store` (created if missing) when given, else a fresh
// <temp>/<prefix>-XXXXXX.
StatusOr<std::string> demo_run_dir(const std::optional<std::string>& store,
                                   const std::string& prefix);

// A demo's dev CA in tls_dir, unless one is there already (a rerun on the same --store keeps
// its certificates): the CA, a server certificate per name in `servers` and a node
// certificate per name in `nodes`.
Status provision_dev_ca(const std::string& tls_dir, const std::vector<std::string>& servers,
                        const std::vector<std::string>& nodes);

struct CoordinatorLaunch {
  coordinator::ExperimentConfig config;
  std::string store_dir;
  std::string listen = "127.0.0.1:0";  // gRPC for nodes; "" = none (in-process sites)
  std::string tls_dir;                      // CA dir with the server's certificate
  std::string server_name = "coordinator";  // certificate name of the coordinator
  bool insecure = false;
  // The bulk lane for pulls and pushes (transport/bulk_lane.h) on HOST:PORT; "" = none. TLS only.
  std::string bulk_listen;
  // The launch config's experiment's events (rounds, joins, the end).
  std::function<void(const coordinator::Event&)> on_event;
  // Also the events of the experiments the dashboard starts later on this store: `atoll
  // coordinator` logs them and evaluates their rounds; the demos follow their own experiment only.
  std::function<void(const coordinator::Event&)> on_other_event;
  // Dashboard and REST API over HTTPS with the same server certificate; "" = none (always none
  // with `insecure`: the dashboard needs TLS).
  std::string http_listen;
  std::string web_root;      // dashboard files; "" = web/ in the working directory or the tree
  // Plain-HTTP `GET /metrics` for scrapers (no authentication: a private address); "" = none.
  // The dashboard's HTTPS port serves the same text to viewer tokens either way.
  std::string metrics_listen;
  // Where each refused connection's one line goes (default: stderr): a handshake refused, and
  // connections closed at a cap (at most one line per 10 s a port).
  std::function<void(const std::string&)> refusal_sink;
  // The CA's certificate revocation list (transport/tls/revocation.h): "" = tls_dir/ca.crl,
  // used when it exists; a file named here must exist. Where the list's lines go (a new list
  // in force, a change refused); default stderr.
  std::string crl_file;
  std::function<void(const std::string&)> revocation_sink;
  std::string node_modules;  // npm packages (chart.js); "" = found like web_root
  // Connection caps and timeouts of the gRPC port and of the dashboard (docs/coordinator.md,
  // docs/dashboard.md "Server limits").
  transport::ServerLimits grpc_limits;
  coordinator::http::HttpLimits http_limits;
  // θ_0 of a new experiment (numel of the model); empty = init_params(model, seed). Ignored when
  // the store already holds the experiment (it resumes from its last committed round).
  std::vector<float> initial_theta;
  // The checkpoint initial_theta came from (--init-from, a Hydra --base): its tokenizer and
  // Hugging Face metadata go into this experiment's checkpoints (--out, the dashboard's
  // download), so that they read their data as the sites did (node::carry_base_meta).
  std::optional<node::CheckpointMeta> initial_meta;
  // A LoRA experiment's base when the caller read it already (config resolved by
  // resolve_lora_base); null: launch_coordinator reads config.lora.base.
  std::shared_ptr<const node::BaseModel> base;
};

// θ_0 from a checkpoint written by `atoll train` (or a coordinator's model download): a warm
// start, as the DiLoCo paper starts from a pretrained model. The checkpoint's model must be the
// experiment's (same vocabulary, shape, MoE layout and RoPE base): otherwise one line naming the
// first field that differs. Its optimizer state, step and data order are not used; its meta
// (tokenizer, Hugging Face files) is kept for CoordinatorLaunch::initial_meta and the evaluator.
struct InitialCheckpoint {
  std::vector<float> theta;
  node::CheckpointMeta meta;
};
StatusOr<InitialCheckpoint> initial_checkpoint(const std::string& path,
                                               const algorithms::ModelConfig& model);

// A LoRA experiment's base (config.lora.base, node/base_model.h) read into the config: [model]
// becomes the base's model config (seq_len stays the config's) and lora.base_fingerprint its
// SHA-256; a fingerprint already given must match (one line naming both). No-op without [lora].
// `loaded`, when given, receives the base.
Status resolve_lora_base(coordinator::ExperimentConfig& config,
                         std::shared_ptr<const node::BaseModel>* loaded = nullptr);

struct RunningCoordinator {
  // With TLS: each connection the gRPC server refuses is one clear line on stderr.
  std::unique_ptr<transport::HandshakeRefusalLog> refusals;
  // With TLS: the revocation list every service checks node certificates against.
  std::shared_ptr<transport::RevocationWatch> revocations;
  std::unique_ptr<coordinator::Store> store;
  // Prometheus metrics of every service of this process (read by the dashboard's /metrics and
  // by metrics_http).
  std::unique_ptr<coordinator::CoordinatorMetrics> metrics;
  // Forwards nodes' gRPC calls to the live service (the manager switches it when the dashboard
  // starts another stored experiment).
  std::unique_ptr<coordinator::ServiceRouter> router;
  std::unique_ptr<coordinator::ExperimentManager> manager;
  // The experiment of the launch config (live until the dashboard starts another one; see
  // manager->live()).
  std::shared_ptr<coordinator::CoordinatorService> service;
  std::unique_ptr<coordinator::CoordinatorServer> server;  // null when listen is ""
  std::unique_ptr<coordinator::http::HttpServer> http;  // null without a dashboard
  std::unique_ptr<transport::metrics::HttpExporter> metrics_http;  // null without metrics_listen
  algorithms::ModelConfig model;
  // The launch config as served: with [lora], the base's model config and fingerprint in it.
  coordinator::ExperimentConfig config;
  std::shared_ptr<const node::BaseModel> base;  // the LoRA base (null without [lora])
  std::string store_dir;  // the launch's store directory
  std::string web_root;   // where the dashboard's pages are served from ("" without a dashboard)
  std::string chart_library;  // the chart library's file the pages load ("" without a dashboard)
  // Metrics listener, dashboard, gRPC server, services, manager, metrics, router, store,
  // refusal log.
  ~RunningCoordinator();
};

// Writes experiment `id`'s latest θ as a checkpoint file (ExperimentManager::checkpoint: with
// [lora], base + adapters).
Status write_final_checkpoint(const RunningCoordinator& rc, const std::string& id,
                              const std::string& path);

// A directory of the source tree (web, node_modules): in the working directory, else next to
// the binary's build directory. Returns `relative` unchanged when neither exists.
std::string find_tree_dir(const std::string& relative);
// The npm packages (Chart.js) for the dashboard: --node-modules's, else node_modules beside the
// pages' directory when --web named one (web/ and node_modules/chart.js/dist installed
// together), else found like web/.
std::string npm_packages_dir(const CoordinatorLaunch& l);
// The chart library's file under `npm` (npm_packages_dir), absolute; when it is missing and
// --web named the pages' directory, the file beside it, where the library goes.
std::string chart_library_path(const CoordinatorLaunch& l, const std::string& npm);

// Opens (or resumes) the experiment and starts serving; the experiment is not started yet.
StatusOr<std::unique_ptr<RunningCoordinator>> launch_coordinator(const CoordinatorLaunch& launch);

// With a dashboard: prints "dashboard: URL" and, when `always` or the store holds no token yet,
// creates an admin token labelled `label`, writes it to STORE/admin-token (mode 0600) and prints
// "token file: PATH". The token itself is printed ("token: atl_...", shown once) only by the
// demos (`always`) or when stdout is a terminal, so that a coordinator's log never holds it.
// Without a dashboard it does nothing. `say` (default: a line on stdout) prints each line.
Status announce_dashboard(RunningCoordinator& rc, const std::string& label, bool always,
                          const std::function<void(const std::string&)>& say = {});

}  // namespace atl::cli
