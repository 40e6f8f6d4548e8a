#include "node/reconnect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

namespace atl::node {

Backoff::Backoff(BackoffOptions options, uint64_t seed)
    : options_(options), base_ms_(static_cast<double>(options.initial.count())), rng_(seed) {}

std::chrono::milliseconds Backoff::next() {
  const double cap = static_cast<double>(options_.max.count());
  std::uniform_real_distribution<double> factor(1 - options_.jitter, 1 + options_.jitter);
  // Jitter never takes a delay past the cap: at the cap, delays spread over [cap·(1 − jitter),
  // cap].
  const double ms = std::min(std::min(base_ms_, cap) * factor(rng_), cap);
  base_ms_ = std::min(base_ms_ * options_.multiplier, cap);
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(ms)));
}

void Backoff::reset() {
  base_ms_ = static_cast<double>(options_.initial.count());
}

Reconnect::Reconnect(CoordinatorClient& link, ReconnectOptions options)
    : link_(link), options_(std::move(options)), backoff_(options_.backoff) {}

double Reconnect::unreachable_s() const {
  return since_ ? std::chrono::duration<double>(Clock::now() - *since_).count() : 0.0;
}

void Reconnect::reached() {
  if (since_) {
    char line[160];
    std::snprintf(line, sizeof(line), "%s at %s reachable after %.1f s", options_.subject.c_str(),
                  options_.coordinator.c_str(), unreachable_s());
    log(line);
  }
  since_.reset();
  backoff_.reset();
  last_logged_.clear();
}

Status Reconnect::pause(const Status& failure) {
  const auto now = Clock::now();
  if (!since_) since_ = now;
  if (stopping()) return failure;
  const double down = unreachable_s();
  // A coordinator that answers with a refusal (e.g. its max_nodes are there) is no unreachable
  // one: the lines say which this node has had since its last progress.
  const bool answered =
      failure.code() != StatusCode::kUnavailable && failure.code() != StatusCode::kDeadlineExceeded;
  const char* how = answered ? "refused" : "unreachable";
  if (down >= options_.give_up_after_s) {
    char head[200];
    std::snprintf(head, sizeof(head),
                  "%s %s for %.1f s (--give-up-after %g s), giving up; last failure: ",
                  options_.subject.c_str(), how, down, options_.give_up_after_s);
    return Unavailable(head + failure.message());
  }
  // The attempt after the pause happens by the give-up deadline, so that the node gives up at
  // give_up_after_s (plus that attempt), not up to a whole delay later.
  const auto give_up_at = *since_ + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.give_up_after_s));
  const auto delay = std::min<Clock::duration>(backoff_.next(), give_up_at - now);

  const bool same = failure.message() == last_logged_;
  if (!same ||
      std::chrono::duration<double>(now - last_logged_at_).count() >= options_.repeat_log_after_s) {
    char tail[96];
    std::snprintf(tail, sizeof(tail), "; retrying in %.1f s",
                  std::chrono::duration<double>(delay).count());
    std::string line = failure.message() + tail;
    if (same) {
      char still[64];
      std::snprintf(still, sizeof(still), " (%s for %.0f s)", how, down);
      line += still;
    }
    log(line);
    last_logged_ = failure.message();
    last_logged_at_ = now;
  }

  // Sliced so that a stop request is seen within 100 ms.
  const auto until = now + delay;
  while (!stopping()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    const auto slice = std::min(left, std::chrono::milliseconds(100));
    if (!options_.wake_on_link)
      std::this_thread::sleep_for(slice);
    else if (link_.wait_for_link(slice))
      break;
  }
  return stopping() ? failure : Status::Ok();
}

}  // namespace atl::node
