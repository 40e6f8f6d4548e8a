// The coordinator's Prometheus metrics (docs/dashboard.md, "Metrics and logs"), served at
// `GET /metrics` on the dashboard's HTTPS port (viewer token) and, with `atoll coordinator
// --metrics HOST:PORT`, over plain HTTP:
//   counted from the round engines' events   rounds committed and restarted, updates accepted
//                                            and rejected by reason, tokens, round durations,
//                                            commit durations, the last round's train
//                                            loss, the privacy ε
//                                            spent (atoll_privacy_epsilon, once a round of
//                                            an experiment with [privacy] on committed)
//   measured by the gRPC service             payload bytes by direction, push latency
//   set by the coordinator's evaluation      validation bits per byte
//   read from the live experiment at scrape  its round, its nodes by state, its name and
//                                            algorithm (atoll_experiment_info), and the
//                                            process's resident memory
//   read from the listeners at scrape        connections open and refused per port (gRPC, the
//                                            bulk lane, the dashboard), the lane's transfers
// Counters count this process's work, whichever experiment was live (the dashboard can switch
// it); they start at 0 when the coordinator starts, as Prometheus expects of counters. The
// gauges that describe one experiment (atoll_train_loss, atoll_validation_bits_per_byte,
// atoll_privacy_epsilon) are the live experiment's: absent until it sets them, so that after a
// switch no value of the previous experiment is paired with the new one.
//
// Threads: every method may be called from any thread (transport/metrics/registry.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "coordinator/engine_types.h"
#include "transport/metrics/registry.h"

namespace atl::coordinator {

class CoordinatorService;
class ExperimentManager;

// Buckets of atoll_round_duration_seconds (a demo's round takes seconds, a real one hours) and
// of atoll_push_duration_seconds (one update's upload, and for the last one the commit) and
// atoll_round_commit_seconds (a round's close to its durable commit).
const std::vector<double>& round_duration_buckets();
const std::vector<double>& push_duration_buckets();

class CoordinatorMetrics {
 public:
  // `manager` (may be null: no live-experiment gauges) must outlive this object; it is read
  // at every render().
  explicit CoordinatorMetrics(const ExperimentManager* manager);
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // An event of experiment `experiment_id`'s engine (ServiceOptions::on_event).
  void observe(const std::string& experiment_id, const Event& e);
  // θ payload bytes streamed to a node (down) and update payload bytes received (up).
  void add_bytes_down(uint64_t bytes);
  void add_bytes_up(uint64_t bytes);
  // An accepted PushUpdate: from its first chunk to the answer, in seconds.
  void observe_push(double seconds);
  // The global validation bits per byte of experiment `experiment_id`'s latest evaluated θ.
  void set_validation_bpb(const std::string& experiment_id, double bits_per_byte);

  // A listening port, read at every render(): atoll_connections{port} (open now),
  // atoll_connections_refused_total{port} (closed at once because a cap was reached, since the
  // start) and, with `evicted` (a port that closes its longest idle connection to make room),
  // atoll_connections_evicted_total{port}. `port` names it: "grpc", "bulk" or "dashboard". The
  // functions are called at every render() for as long as this object lives: the listener must
  // outlive every scrape (RunningCoordinator stops the scrapers first).
  void watch_port(const std::string& port, std::function<size_t()> open,
                  std::function<uint64_t()> refused, std::function<uint64_t()> evicted = {});
  // The bulk lane's whole transfers, read at every render():
  // atoll_bulk_lane_transfers_total{direction} (down = pulls sent, up = pushes received).
  void watch_bulk_lane(std::function<uint64_t()> pulls_sent,
                       std::function<uint64_t()> pushes_received);

  // The text exposition (transport::metrics::kContentType).
  std::string render() const;
  transport::metrics::Registry& registry() { return registry_; }

 private:
  void collect_live();  // the gauges read from the live experiment
  // The experiment gauges of `experiment_id` ("" = none): its values, the others removed.
  void publish_experiment_gauges(const std::string& experiment_id);
  // The live experiment's last committed round (a coordinator started on a store that holds
  // some): its train loss and ε, shown from the first scrape instead of after the next commit.
  // Once per experiment made live.
  void restore_gauges(const CoordinatorService& live);

  // What one experiment set of the gauges that describe it (nullopt: not yet).
  struct ExperimentGauges {
    std::optional<double> train_loss;
    std::optional<double> validation_bpb;
    std::optional<double> privacy_epsilon;
  };
  // Which experiment's gauges to show when no manager says which one is live.
  std::string latest_experiment() const;

  const ExperimentManager* manager_;
  transport::metrics::Registry registry_;
  transport::metrics::Counter& rounds_committed_;
  transport::metrics::Counter& rounds_restarted_;
  transport::metrics::Counter& updates_accepted_;
  transport::metrics::Counter& tokens_;
  transport::metrics::Counter& bytes_up_;
  transport::metrics::Counter& bytes_down_;
  transport::metrics::Gauge& round_;
  transport::metrics::Gauge& nodes_active_;
  transport::metrics::Gauge& nodes_lost_;
  transport::metrics::Gauge& nodes_left_;
  transport::metrics::Gauge& nodes_revoked_;
  transport::metrics::Histogram& round_duration_;
  transport::metrics::Histogram& push_duration_;
  transport::metrics::Histogram& commit_duration_;
  // By experiment id; with a manager, only the live experiment's entry is kept past a scrape.
  mutable std::mutex experiment_gauges_mu_;
  std::map<std::string, ExperimentGauges> experiment_gauges_;
  std::string latest_experiment_;  // the one that set a gauge last
  std::set<std::string> restored_;  // experiments restore_gauges read the store for
};

}  // namespace atl::coordinator
