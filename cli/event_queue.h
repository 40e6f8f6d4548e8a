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

// A round-commit event carries its θ (Event::params) so that the main thread evaluates the
// round it is told about even after the store pruned that version. The queue holds those
// snapshots for its newest kHeldSnapshots commit events only: a main thread that falls further
// behind gets older events without θ (and evaluates from the store, or reports the round not
// evaluated) instead of holding every θ of the backlog in memory.
class EventQueue {
 public:
  static constexpr int kHeldSnapshots = 4;

  void push(const coordinator::Event& e) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(e);
      if (e.params) {
        int held = 0;
        for (auto it = q_.rbegin(); it != q_.rend(); ++it)
          if (it->params && ++held > kHeldSnapshots) it->params.reset();
      }
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
