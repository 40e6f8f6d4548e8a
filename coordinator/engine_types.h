// Types the round engine (coordinator/round_engine.h) shares with whoever drives it: the gRPC
// service, the dashboard's experiment manager, an in-process simulator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

// Milliseconds since the Unix epoch (system clock): the time stamps of records and snapshots.
inline uint64_t unix_ms_now() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

using Clock = std::chrono::steady_clock;
// A config's seconds (diloco.round_deadline_s, heartbeat_interval_s, ...) as a Clock duration.
// Nanoseconds in 64 bits hold ~292 years: validation bounds every such key to 30 days.
inline Clock::duration duration_of_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// a + b and a · b, saturating at 2^64 − 1 instead of wrapping: token counts come from the
// network and are summed over nodes and rounds.
inline uint64_t add_saturating(uint64_t a, uint64_t b) {
  uint64_t s = 0;
  return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}
inline uint64_t mul_saturating(uint64_t a, uint64_t b) {
  uint64_t p = 0;
  return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}

// Progress and lifecycle, delivered in order on the engine's event thread.
struct Event {
  enum class Kind {
    kStateChanged,  // message: "running", "paused", ...
    kNodeJoined,
    kNodeLost,  // silent for lost_after_heartbeats × heartbeat_interval_s
    kNodeLeft,
    kNodeRevoked,   // its certificate was revoked (message: which list, which serial)
    kRoundStarted,  // participants in `participants`
    kUpdateAccepted,
    kUpdateRejected,  // message: why (the status returned to the node)
    kRoundCommitted,  // `record` holds the committed RoundRecord
    kRoundRestarted,  // quorum not reached; message: why
    kMetrics,         // `metrics` from ReportMetrics
    kFinished,
    kFailed,  // message: why (stores of earlier versions only: nothing enters `failed` now)
    // The store could not be written (the experiment pauses) or can be again (it resumes);
    // message: the line saying which and why.
    kStore,
    // A secure-aggregation stage closed at the round deadline without some sites; message: the
    // line naming the stage and them (the rest of the round gets a new deadline).
    kSecAggDeadline,
  };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  // The experiment whose engine emitted it (set by RoundEngine::emit): a listener that follows
  // the experiments the dashboard starts one after another tells them apart.
  std::string experiment_id;
  uint64_t round = 0;
  std::string node_id;
  std::string message;
  std::vector<std::string> participants;
  std::optional<RoundRecord> record;
  // kRoundCommitted: θ after the round (θ_{round+1}) as committed, the engine's immutable
  // snapshot (shared, not copied). A listener that falls behind still has the θ of every round
  // it is told about, after the store has pruned it (keep_params newest versions are kept).
  std::shared_ptr<const std::vector<float>> params;
  std::vector<std::pair<std::string, double>> metrics;
  // kUpdateRejected: why, as one of update_rejection_reasons() (a metrics label).
  std::string reason;
  // kRoundCommitted: seconds from the round's close to its commit being durable (screening,
  // the outer step, the broadcast's encoding and the store's synced write). Not stored.
  double commit_s = 0.0;
};
const char* event_kind_name(Event::Kind kind);

// Why an update is refused, one word each (atoll_updates_rejected_total{reason=…}):
//   wire_version   an unsupported wire_version in the header
//   duplicate      the node's update for this round was already accepted or is being received
//   stale_round    not for the open round (or the round closed while the payload streamed in)
//   wrong_shape    the layout, fragment, mask or element count does not match
//   wrong_base     computed from another θ than the round's
//   codec          a codec this coordinator does not take, or a payload it cannot decode
//   bad_header     tokens = 0 or a non-finite train_loss
//   too_large      a payload over numel·4 bytes plus the codec slack
//   not_finite     the decoded update holds NaN or Inf
//   transfer       the payload did not arrive whole (stream broken, checksum, cancelled)
const std::vector<const char*>& update_rejection_reasons();

// A node as the coordinator sees it (for progress displays and the dashboard).
struct NodeSnapshot {
  std::string node_id;
  std::string status;  // "active", "lost", "left", "revoked"
  bool ready = false;  // waiting for a task
  // Latest heartbeat progress.
  uint64_t round = 0;
  uint32_t inner_step = 0;
  double loss = 0.0;
  double tokens_per_s = 0.0;
  uint64_t last_seen_unix_ms = 0;  // last call of any kind (heartbeat, poll, push)
  std::string device;              // as reported at Join
};

// Decodes a pseudo-gradient payload of codec `codec` (any codec but "none", whose payload is
// raw little-endian fp32 and needs no decoder) into numel fp32 values.
using PayloadDecoder = std::function<StatusOr<std::vector<float>>(
    const std::string& codec, const std::string& payload, uint64_t numel)>;

}  // namespace atl::coordinator
