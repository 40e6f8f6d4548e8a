// Experiments as the dashboard and the REST API see them: every experiment in the Store, plus
// the ONE whose CoordinatorService this process's gRPC server routes nodes to (the "live" one).
//
// A CoordinatorService runs one experiment; nodes find it through the coordinator's gRPC
// address, where a ServiceRouter forwards their calls to the live service. The manager creates,
// lists, inspects, stops and deletes experiments in the store, and forwards lifecycle changes
// (start, pause, resume, stop) to the live service. Starting (or resuming) a stored experiment
// that is not live switches the live one: when the live experiment is not running (created,
// paused, finished or failed), the manager opens a service for the stored one
// (ManagerOptions::open_service), starts it and makes it live (ManagerOptions::router); while
// the live one runs, the start is refused (docs/decisions.md, "Dashboard: one live experiment
// per coordinator").
//
// Threads: every method may be called from any thread. The live service is a shared_ptr guarded
// by a shared mutex: readers and lifecycle calls hold it shared, attach() and a switch hold it
// exclusively (a switch opens and starts the new service under it, so two switches never race).
// A replaced service is released only after the mutex is unlocked: its destructor joins its
// event thread, whose callback (on_event with an id) never takes the mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "coordinator/experiment_config.h"
#include "coordinator/folded_series.h"
#include "coordinator/router.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

struct ExperimentSummary {
  ExperimentRecord record;
  ExperimentConfig config;  // parsed from record.config_toml (defaults if it cannot be parsed)
  bool live = false;        // hosted by this process's gRPC server
  uint32_t active_nodes = 0;
  std::string node_address;  // HOST:PORT where nodes join the live experiment ("" = not known)
};

struct NodeView {
  std::string node_id;
  std::string status;  // "active", "lost", "left", "revoked"
  std::string device;
  double budget = 1.0;  // Hydra: its share of the full model's cost, from its join
  bool ready = false;
  // Latest heartbeat progress, while the experiment runs or is paused on this coordinator
  // (has_progress); a finished or failed run has none (the API writes null).
  bool has_progress = false;
  uint64_t round = 0;
  uint32_t inner_step = 0;
  double loss = 0.0;
  double tokens_per_s = 0.0;
  uint64_t joined_unix_ms = 0;
  uint64_t last_seen_unix_ms = 0;  // last heartbeat (or join)
  // Totals over the committed rounds this node took part in.
  uint64_t rounds = 0;
  uint64_t tokens = 0;
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
};

// What the experiment list shows of each run without fetching its series.
struct ExperimentTotals {
  // The coordinator's validation bpb after the latest evaluated round, and its lowest; nullopt
  // until a committed round is evaluated (the initial parameters' bpb is not a result).
  std::optional<double> final_val_bpb;
  std::optional<double> best_val_bpb;
  uint64_t started_unix_ms = 0;         // the first round's start (commit − duration); 0: none
  uint64_t last_commit_unix_ms = 0;     // the latest round's commit; 0: none
};

struct MetricSeries {
  uint64_t total_rounds = 0;  // committed rounds
  uint64_t bucket = 1;        // rounds averaged into one point (1 = every round)
  // "mean_loss", "tokens", "bytes" (up + down per round), "ddp_bytes" (what data-parallel
  // training would move for the same steps), "duration_s", and what the coordinator published
  // (e.g. "val_bpb").
  std::map<std::string, Series> global;
  // metric → node → series: "loss" (mean inner loss per round), "tokens_per_s", "bytes_up",
  // "site_val_bpb" (the site's own validation bpb, from nodes that hold validation data).
  std::map<std::string, std::map<std::string, Series>> per_node;
};

// A change listeners hear about; `json` is an object (see json_views.h for its fields).
struct ManagerEvent {
  std::string experiment_id;
  std::string kind;  // "state", "node", "round_started", "round", "metrics", "eval", "log",
                     // "experiments"
  std::string json;
};

// Encodes θ as a safetensors checkpoint (node/checkpoint.h lives above this layer, so the
// binary provides it).
using CheckpointEncoder = std::function<StatusOr<std::string>(const ExperimentRecord& record,
                                                              const ExperimentConfig& config,
                                                              const std::vector<float>& params)>;

// Opens a CoordinatorService for a stored experiment (its config and stored θ), with its events
// wired to ExperimentManager::on_event(record.id, e). The service is not started.
using ServiceFactory = std::function<StatusOr<std::shared_ptr<CoordinatorService>>(
    const ExperimentRecord& record, const ExperimentConfig& config)>;

// Reads a LoRA experiment's base checkpoint (config.lora.base) and writes its model config into
// [model] and its fingerprint into lora.base_fingerprint (checking one given), as the binary
// that can read checkpoints does (cli/coordinator_setup.h: resolve_lora_base).
using BaseResolver = std::function<Status(ExperimentConfig& config)>;

struct ManagerOptions {
  // Largest model create() accepts, in fp32 parameters (θ_0 is allocated at creation).
  uint64_t max_params = kMaxParams;
  // Empty: checkpoint() answers FAILED_PRECONDITION.
  CheckpointEncoder encode_checkpoint;
  // Empty: create() of a LoRA experiment answers FAILED_PRECONDITION.
  BaseResolver resolve_base;
  // Empty: start() of an experiment that is not live answers FAILED_PRECONDITION (serve_hint).
  ServiceFactory open_service;
  // Where nodes' calls go: attach() and a switch make the live service current there. Must
  // outlive the manager. Null: the caller serves the attached service itself.
  ServiceRouter* router = nullptr;
  // What start() says when asked to start an experiment that is not live and cannot switch.
  std::string serve_hint = "atoll coordinator --config FILE --store DIR";
};

class ExperimentManager {
 public:
  explicit ExperimentManager(Store& store, ManagerOptions options = {});
  ExperimentManager(const ExperimentManager&) = delete;
  ExperimentManager& operator=(const ExperimentManager&) = delete;

  // The live service (shared ownership); nullptr detaches. Blocks until no manager call is in
  // flight; the previous service is released after the lock.
  void attach(std::shared_ptr<CoordinatorService> service);
  // Not owned: `service` must outlive its attachment.
  void attach(CoordinatorService* service);
  std::shared_ptr<CoordinatorService> live() const;
  // The gRPC address nodes join at (`atoll node --coordinator HOST:PORT`), shown by the
  // dashboard while an experiment waits for nodes; set once the gRPC server listens.
  void set_node_address(const std::string& address);
  // Forward ServiceOptions::on_event of a service here, naming its experiment (services opened
  // by a switch must use this form; it never takes the service mutex).
  void on_event(const std::string& experiment_id, const Event& e);
  // The same for the live service (looks its id up).
  void on_event(const Event& e);
  // A value the coordinator computed itself, e.g. "val_bpb" after round r (x = rounds
  // completed). Stored with the metrics (node id "@coordinator") and announced as "eval".
  Status publish_metric(const std::string& experiment_id, uint64_t round, const std::string& name,
                        double value);
  // The value publish_metric stored for `name` at `round`; nullopt when none was published.
  StatusOr<std::optional<double>> published_metric(const std::string& experiment_id, uint64_t round,
                                                   const std::string& name) const;

  using Listener = std::function<void(const ManagerEvent&)>;
  // Listeners run on the thread that produced the event; they must not block or call back.
  uint64_t subscribe(Listener listener);
  void unsubscribe(uint64_t id);

  StatusOr<ExperimentSummary> create(const ExperimentConfig& config);
  StatusOr<std::vector<ExperimentSummary>> list() const;
  StatusOr<ExperimentSummary> get(const std::string& id) const;
  // The live experiment: starts it (created → running). Another one, created or paused: makes
  // it live and starts it, if the live one is not running (FAILED_PRECONDITION otherwise).
  Status start(const std::string& id);
  Status pause(const std::string& id);
  Status resume(const std::string& id);
  Status stop(const std::string& id);
  // A coordinator's start (`atoll coordinator` on a store it serves again). The experiment other
  // than `served` that is still "running" because a coordinator stopped while it ran, if any: a
  // stored experiment is not live here yet, so its state is what the last process left. Made
  // live by the API (its audit's latest "live" line, kLiveFromApi) it is the one to serve again;
  // started by another --config, `served` replaces it, and it is paused so that it can be
  // resumed later instead of staying "running" with no one serving it.
  struct LeftRunning {
    std::string id;
    bool made_live_from_api = false;
  };
  StatusOr<std::optional<LeftRunning>> left_running(const std::string& served) const;
  Status pause_left_running(const std::string& id, const std::string& why);
  // The audit line that says `id` is served from the --config of `atoll coordinator`.
  Status note_served_from_config(const std::string& id);
  // Not for the live experiment (its service holds it open).
  Status remove(const std::string& id);

  StatusOr<std::vector<NodeView>> nodes(const std::string& id) const;
  // Hydra: (node id, subnetwork text form) of the sites of the latest selection, sorted by node
  // id. Known only for the live experiment (the service holds them, the store does not); empty
  // for any other experiment and for algorithm = "diloco".
  StatusOr<std::vector<std::pair<std::string, std::string>>> subnets(const std::string& id) const;
  // Committed rounds [from, from + limit), oldest first.
  StatusOr<std::vector<RoundRecord>> rounds(const std::string& id, uint64_t from,
                                            uint64_t limit) const;
  // Every series downsampled to at most max_points points (≥ 2) by averaging whole buckets.
  StatusOr<MetricSeries> metrics(const std::string& id, uint32_t max_points) const;
  // Final and best validation bpb and the run's start and last commit (two rounds read, and
  // the metric reports).
  StatusOr<ExperimentTotals> totals(const std::string& id) const;
  // Safetensors bytes of the latest committed θ; `filename` gets "<id>-round<r>.safetensors".
  StatusOr<std::string> checkpoint(const std::string& id, std::string* filename) const;

  static constexpr const char* kCoordinatorNode = "@coordinator";

 private:
  StatusOr<ExperimentSummary> summarize(const ExperimentRecord& record) const;  // svc_mu_ held
  bool is_live(const std::string& id) const;                                    // svc_mu_ held
  void emit(ManagerEvent e);
  // Opens, starts and makes `id` live; the replaced service lands in *release (svc_mu_ held
  // exclusively).
  Status switch_to_locked(const std::string& id, std::shared_ptr<CoordinatorService>* release);

  Store& store_;
  const ManagerOptions options_;
  mutable std::shared_mutex svc_mu_;
  std::shared_ptr<CoordinatorService> service_;
  std::string node_address_;  // guarded by svc_mu_
  // totals() of finished and failed experiments, with the round count they were computed at
  // (GET /api/experiments asks for every experiment's totals on every request).
  mutable std::mutex totals_mu_;
  mutable std::map<std::string, std::pair<uint64_t, ExperimentTotals>> settled_totals_;
  // What the committed round records give the dashboard's series and node totals, folded in
  // once per record: every open tab asks for both about once a second, and rereading every
  // record took 0.5 s at 55k rounds. Each series is kept in bounded memory (FoldedSeries: at
  // most 120 kB, however many rounds) and bucketed per request. Records never change once
  // committed.
  struct RecordFold {
    uint64_t rounds = 0;  // records [0, rounds) are in
    std::map<std::string, FoldedSeries> global;  // one value per committed round
    std::map<std::string, std::map<std::string, FoldedSeries>> per_node;
    struct NodeTotals {
      uint64_t rounds = 0, tokens = 0, bytes_up = 0, bytes_down = 0;
    };
    std::map<std::string, NodeTotals> totals;
    // The metrics reports read so far: per reporting node the store key of its last one, the
    // coordinator's values (name → series; the latest report of a round wins) and the nodes'
    // (metric → node → series), and the validation bpb of the coordinator's last evaluated
    // round and its best (round 0, the initial parameters, is neither).
    std::map<std::string, std::string> report_cursor;
    std::map<std::string, FoldedSeries> coordinator_reports;
    std::map<std::string, std::map<std::string, FoldedSeries>> node_reports;
    double final_val_bpb_round = -1;
    std::optional<double> final_val_bpb, best_val_bpb;
  };
  // Folds the records of `id` up to `rounds` in (under fold_mu_; the caller holds it).
  void fold_records_locked(const std::string& id, const ExperimentSummary& s,
                           RecordFold& fold) const;
  // Reads the metrics reports stored since the last call into `fold` (each report once: a
  // request costs the new reports, not all of them).
  Status fold_reports_locked(const std::string& id, RecordFold& fold) const;
  mutable std::mutex fold_mu_;
  mutable std::map<std::string, RecordFold> folds_;
  std::mutex listeners_mu_;
  std::map<uint64_t, Listener> listeners_;
  uint64_t next_listener_ = 1;
};

}  // namespace atl::coordinator
