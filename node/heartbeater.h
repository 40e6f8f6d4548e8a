// Heartbeats from a side thread while the worker trains: every `interval`, the latest progress
// (round, inner step, loss, tokens/s) goes to the coordinator. A reply that the coordinator no
// longer knows this node is remembered for the worker, which joins again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "node/coordinator_client.h"

namespace atl::node {

class Heartbeater {
 public:
  Heartbeater(CoordinatorClient& link, std::chrono::milliseconds interval);
  ~Heartbeater();  // stops and joins the thread
  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;

  void progress(uint64_t round, uint32_t step, double loss, double tokens_per_s);
  bool unknown() const { return unknown_.load(); }
  void clear_unknown() { unknown_ = false; }

 private:
  void loop();

  CoordinatorClient& link_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  uint64_t round_ = 0;
  uint32_t step_ = 0;
  double loss_ = 0, tokens_per_s_ = 0;
  std::atomic<bool> unknown_{false};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace atl::node
