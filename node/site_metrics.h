// A site's live statistics: exported as Prometheus metrics by `atoll node --metrics HOST:PORT`
// (docs/dashboard.md, "Metrics and logs"), and read by the node's JSON log lines (which
// experiment, which round). The site worker updates them as it goes; nothing it computes
// depends on them.
//
// Threads: every method may be called from any thread (the worker trains on one, pushes and
// pulls on another, the exporter renders on a third).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "transport/metrics/registry.h"

namespace atl::node {

// Buckets of atoll_node_round_duration_seconds: the inner steps of one round, from a second
// (tests, demos) to hours.
const std::vector<double>& site_round_buckets();

class SiteMetrics {
 public:
  SiteMetrics();
  SiteMetrics(const SiteMetrics&) = delete;
  SiteMetrics& operator=(const SiteMetrics&) = delete;

  // The coordinator accepted this node as `node_id` in `experiment_id`.
  void joined(const std::string& experiment_id, const std::string& node_id);
  // One inner step of `round`: its loss (nats) and tokens.
  void inner_step(uint64_t round, double loss, uint64_t tokens);
  // Wall seconds of one run of inner steps (batch sampling and the steps themselves, overlapped
  // ones included; not the encode, push, pull or waits): compute utilization = this ÷ wall time.
  void trained(double seconds);
  // Payload bytes of a θ pull received (down) and of an update pushed (up).
  void pulled(uint64_t bytes);
  void pushed(uint64_t bytes);
  // Cumulative wire seconds of the pulls and pushes so far (CoordinatorClient::transfer_totals):
  // the counters advance by the increase since the last call. Payload bytes ÷ these seconds is
  // the link's throughput as this node sees it.
  void transfer_seconds(double pull_total, double push_total);
  // A round whose update went out: its inner training time, and the site's validation bpb of
  // the θ it started from (when the site has validation data).
  void round_done(double train_seconds, std::optional<double> site_val_bpb);

  // What the log lines carry: the experiment joined ("" before) and the round being trained.
  std::string experiment() const;
  std::optional<uint64_t> round() const;

  std::string render() const { return registry_.render(); }

 private:
  transport::metrics::Registry registry_;
  transport::metrics::Counter& steps_;
  transport::metrics::Counter& tokens_;
  transport::metrics::Counter& rounds_;
  transport::metrics::Counter& train_seconds_;
  transport::metrics::Counter& bytes_up_;
  transport::metrics::Counter& bytes_down_;
  transport::metrics::Counter& wire_up_seconds_;
  transport::metrics::Counter& wire_down_seconds_;
  transport::metrics::Gauge& loss_;
  transport::metrics::Gauge& round_gauge_;
  transport::metrics::Histogram& round_seconds_;
  mutable std::mutex mu_;
  std::string experiment_;
  std::atomic<int64_t> round_{-1};  // -1: no round trained yet
  double pull_seconds_seen_ = 0, push_seconds_seen_ = 0;  // guarded by mu_
};

}  // namespace atl::node
