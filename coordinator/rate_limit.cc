#include "coordinator/rate_limit.h"

#include <algorithm>

namespace atl::coordinator {

void RateLimiter::refill(Bucket& b, Clock::time_point now) const {
  if (now <= b.refilled) return;
  const double elapsed = std::chrono::duration<double>(now - b.refilled).count();
  b.tokens = std::min(limit_.burst, b.tokens + elapsed * limit_.per_second);
  b.refilled = now;
}

void RateLimiter::forget_idle_locked(Clock::time_point now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    refill(it->second, now);
    it = it->second.tokens >= limit_.burst ? buckets_.erase(it) : std::next(it);
  }
}

bool RateLimiter::allow(const std::string& key, Clock::time_point now) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) forget_idle_locked(now);
    // Still full of busy keys: the newcomer is refused rather than the table growing.
    if (buckets_.size() >= max_keys_) return false;
    it = buckets_.emplace(key, Bucket{limit_.burst, now}).first;
  }
  Bucket& b = it->second;
  refill(b, now);
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

}  // namespace atl::coordinator
