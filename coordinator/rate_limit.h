// Per-key token buckets (e.g. one per node and RPC): a key may make `burst` calls at once and
// `per_second` calls a second after that. Thread-safe. The clock is passed in, so tests can step
// it. Keys come from authenticated callers; the table is still bounded: past `max_keys` entries,
// keys whose bucket has refilled completely (idle callers) are forgotten first.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace atl::coordinator {

struct RateLimit {
  double burst = 20.0;      // bucket capacity (calls), ≥ 1
  double per_second = 5.0;  // refill rate (calls per second), > 0
};

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateLimiter(RateLimit limit, size_t max_keys = 4096)
      : limit_(limit), max_keys_(max_keys) {}

  // Takes one call from `key`'s bucket at time `now`: true when there was one to take.
  bool allow(const std::string& key, Clock::time_point now = Clock::now());
  const RateLimit& limit() const { return limit_; }

 private:
  struct Bucket {
    double tokens = 0.0;
    Clock::time_point refilled;
  };
  void refill(Bucket& b, Clock::time_point now) const;
  void forget_idle_locked(Clock::time_point now);

  const RateLimit limit_;
  const size_t max_keys_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace atl::coordinator
