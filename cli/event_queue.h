// Coordinator events handed from the service's event thread to a command's main thread, which
// may take its time with them (evaluate, print) without holding up the service.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "coordinator/service.h"

namespace atl::cli {

class EventQueue {
 public:
  void push(const coordinator::Event& e) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(e);
    }
    cv_.notify_one();
  }
  // The oldest event, or nullopt when none arrives within `wait`.
  std::optional<coordinator::Event> pop(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, wait, [this] { return !q_.empty(); })) return std::nullopt;
    auto e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<coordinator::Event> q_;
};

}  // namespace atl::cli
