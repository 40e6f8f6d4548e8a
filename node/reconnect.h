// Reconnecting to a coordinator that does not answer: how long to wait between attempts, how long
// it has been unreachable, when to give up, and what to log.
//
// One outage has one clock, whichever call noticed it (a poll, a Join, a rejoin), so a node gives
// up after --give-up-after seconds of unreachability, not after that plus a Join loop's own. The
// delays grow exponentially with jitter and are capped, so a coordinator back after a restart is
// reached within about a second; the pause ends early when the link comes up
// (CoordinatorClient::wait_for_link), and at once on a stop request. Log lines say what happens:
//   coordinator at 10.0.0.5:7070 not reachable (connection refused); retrying in 0.4 s
//   coordinator at 10.0.0.5:7070 reachable again after 1.3 s
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include "kernels/core/status.h"
#include "node/coordinator_client.h"

namespace atl::node {

struct BackoffOptions {
  std::chrono::milliseconds initial{100};  // the first delay
  double multiplier = 2.0;                 // each next delay, before the cap
  std::chrono::milliseconds max{1000};     // the cap
  double jitter = 0.2;  // each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]
};

// Delays between retries: initial, ×multiplier after each, at most max, each with jitter so that
// nodes cut off together do not retry in lockstep. reset() after a success.
class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());
  std::chrono::milliseconds next();
  void reset();

 private:
  BackoffOptions options_;
  double base_ms_;  // the next delay before jitter
  std::mt19937_64 rng_;
};

struct ReconnectOptions {
  std::string coordinator;       // "HOST:PORT", for messages
  double give_up_after_s = 120;  // unreachable this long (seconds): give up
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // may be empty
  BackoffOptions backoff;
  // At most this often a line for an outage that goes on with the same failure (seconds).
  double repeat_log_after_s = 10;
  // What is out of reach, in lines: "coordinator" (its calls), or "the coordinator's stream
  // connection" (θ pulls and update pushes, on a connection of their own).
  std::string subject = "coordinator";
  // A pause ends early when the node's call connection is up (wait_for_link). Not for streams:
  // their connection can be refused while the calls' is up.
  bool wake_on_link = true;
};

class Reconnect {
 public:
  Reconnect(CoordinatorClient& link, ReconnectOptions options);

  // The coordinator answered: an outage, if any, is over (logged with its length), and the next
  // one starts from the first delay.
  void reached();
  // `failure` is a transport error (the coordinator did not answer): waits before the next
  // attempt, the backoff's delay or until the link comes up, whichever is first. Returns an
  // error instead when the outage has lasted give_up_after_s ("coordinator at X unreachable for
  // 120.4 s, giving up (--give-up-after 120 s): <failure>"), and `failure` itself on a stop
  // request.
  Status pause(const Status& failure);

  bool unreachable() const { return since_.has_value(); }
  double unreachable_s() const;  // 0 when reachable

 private:
  using Clock = std::chrono::steady_clock;
  bool stopping() const { return options_.stop != nullptr && options_.stop->load(); }
  void log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  CoordinatorClient& link_;
  ReconnectOptions options_;
  Backoff backoff_;
  std::optional<Clock::time_point> since_;  // when the outage began
  std::string last_logged_;                 // the failure last logged, and when
  Clock::time_point last_logged_at_{};
};

}  // namespace atl::node
