// Types the round engine (coordinator/round_engine.h) shares with whoever drives it: the gRPC
// service, the dashboard's experiment manager, an in-process simulator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

using Clock = std::chrono::steady_clock;

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
    kRoundStarted,  // participants in `participants`
    kUpdateAccepted,
    kUpdateRejected,  // message: why (the status returned to the node)
    kRoundCommitted,  // `record` holds the committed RoundRecord
    kRoundRestarted,  // quorum not reached; message: why
    kMetrics,         // `metrics` from ReportMetrics
    kFinished,
    kFailed,  // message: why
  };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  uint64_t round = 0;
  std::string node_id;
  std::string message;
  std::vector<std::string> participants;
  std::optional<RoundRecord> record;
  std::vector<std::pair<std::string, double>> metrics;
};
const char* event_kind_name(Event::Kind kind);

// A node as the coordinator sees it (for progress displays and the dashboard).
struct NodeSnapshot {
  std::string node_id;
  std::string status;  // "active", "lost", "left"
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
