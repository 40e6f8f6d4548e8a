// Each round's metrics report (ReportMetrics) sent from a thread of its own, in the order
// reported, so that the worker's training thread never waits a round trip for a call that only
// reports, and the heartbeats (node/heartbeater.h) never wait behind a slow report. At most
// kMaxQueued reports wait; beyond that the oldest is dropped (a coordinator out of reach for
// many rounds) and dropped() counts it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "node/coordinator_client.h"

namespace atl::node {

class MetricsReporter {
 public:
  static constexpr size_t kMaxQueued = 64;

  explicit MetricsReporter(CoordinatorClient& link);
  ~MetricsReporter();  // drops what is not sent yet; waits for a call in flight
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

  // Queues the metrics of round `round` at global step `step`; returns at once.
  void report(uint64_t round, uint64_t step, std::vector<std::pair<std::string, double>> metrics);
  // Waits until every queued report has been sent, at most `max_wait`; false if some were not.
  bool flush(std::chrono::milliseconds max_wait);
  uint64_t dropped() const { return dropped_.load(); }

 private:
  struct Report {
    uint64_t round = 0, step = 0;
    std::vector<std::pair<std::string, double>> metrics;
  };
  void loop();

  CoordinatorClient& link_;
  std::mutex mu_;
  std::condition_variable cv_;       // wakes the thread: stop, or a report to send
  std::condition_variable sent_cv_;  // wakes flush(): nothing queued and nothing in flight
  bool done_ = false;
  std::deque<Report> queue_;
  bool sending_ = false;  // a report is out (taken from queue_, its call not returned)
  std::atomic<uint64_t> dropped_{0};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace atl::node
