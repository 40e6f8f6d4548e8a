// The node's side thread, so that training never waits for a round trip to the coordinator:
//   - every `interval`, a heartbeat with the latest progress (round, inner step, loss, tokens/s);
//     a reply that the coordinator no longer knows this node is remembered for the worker, which
//     joins again;
//   - each round's metrics report (ReportMetrics), in the order reported. At most
//     kMaxQueuedReports wait; beyond that the oldest is dropped (a coordinator out of reach for
//     many rounds), and dropped_reports() counts them.
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

class Heartbeater {
 public:
  static constexpr size_t kMaxQueuedReports = 64;

  Heartbeater(CoordinatorClient& link, std::chrono::milliseconds interval);
  ~Heartbeater();  // stops and joins the thread; reports not yet sent are dropped (see flush)
  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;

  void progress(uint64_t round, uint32_t step, double loss, double tokens_per_s);
  bool unknown() const { return unknown_.load(); }
  void clear_unknown() { unknown_ = false; }

  // Queues a metrics report for round `round` at global step `step`; returns at once.
  void report(uint64_t round, uint64_t step, std::vector<std::pair<std::string, double>> metrics);
  // Waits until every queued report has been sent (each call bounded by the client's deadline).
  void flush();
  uint64_t dropped_reports() const { return dropped_.load(); }

 private:
  struct Report {
    uint64_t round = 0, step = 0;
    std::vector<std::pair<std::string, double>> metrics;
  };
  void loop();

  CoordinatorClient& link_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;       // wakes the thread: stop, or a report to send
  std::condition_variable sent_cv_;  // wakes flush(): the queue is empty and nothing in flight
  bool done_ = false;
  uint64_t round_ = 0;
  uint32_t step_ = 0;
  double loss_ = 0, tokens_per_s_ = 0;
  std::deque<Report> reports_;
  bool sending_ = false;  // a report is being sent (popped from reports_, call not returned)
  std::atomic<uint64_t> dropped_{0};
  std::atomic<bool> unknown_{false};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace atl::node
