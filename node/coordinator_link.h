// What a site worker (node/site_worker.h) needs from its coordinator: the node side of the
// protocol (transport/proto/atoll.proto) as an interface, so that the worker does not care how
// the messages travel. CoordinatorClient (node/coordinator_client.h) carries them over mTLS
// gRPC; an in-process link can hand them to a coordinator in the same process.
//
// Thread safety: an implementation must accept calls from several threads at once. The worker
// sends heartbeats from a side thread while its main thread trains, and Streaming DiLoCo runs
// push_* / next_task / pull_params on a background thread while the main thread trains.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

struct PulledParams {
  uint64_t round = 0;
  std::vector<float> values;  // numel fp32
  // The version's SHA-256: of `values`, verified, when exact; otherwise the version the
  // coordinator announced (values approximate it at bf16 precision, see docs/protocol.md).
  std::string fingerprint;
  std::string layout_fingerprint;  // as announced by the coordinator
  uint64_t bytes = 0;              // payload bytes received
  std::string codec;               // "none" (full θ), "sparse-delta-exact", "sparse-delta", "bf16"
  bool exact = true;               // values are θ of `round` bit for bit
};

// θ the node holds, named in the pull so that the coordinator can send a delta against it.
struct HeldParams {
  std::span<const float> values;
  std::string fingerprint;  // the version it was told it holds (PulledParams::fingerprint)
  bool exact = true;        // PulledParams::exact of that pull
};

struct UpdateHeader {
  uint64_t round = 0;
  uint64_t tokens = 0;             // tokens processed this round (> 0): aggregation weight
  double train_loss = 0.0;         // mean inner loss over the round
  std::string base_fingerprint;    // θ the update was computed from (PulledParams::fingerprint)
  std::string layout_fingerprint;  // algorithms::layout_fingerprint(layout)
  // Streaming DiLoCo: the update covers θ[fragment_offset, fragment_offset + numel).
  uint64_t fragment_offset = 0;
  // Hydra: the Task's mask fingerprint (numel = the subnetwork's trained element count).
  std::string mask_fingerprint = "";
};

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;

  // Set by join(); later calls carry it.
  virtual const std::string& experiment_id() const = 0;

  // The node's identity comes from the link (its certificate, or the name it was made with);
  // an empty node_name in `req` is filled in from it.
  virtual StatusOr<atoll_pb::v1::JoinResponse> join(atoll_pb::v1::JoinRequest req = {}) = 0;
  // false: the coordinator does not know this node (lost, restarted): join() again.
  virtual StatusOr<bool> heartbeat(uint64_t round, uint32_t inner_step, double loss,
                                   double tokens_per_s) = 0;
  // Long-poll for up to wait_ms (the coordinator caps it).
  virtual StatusOr<atoll_pb::v1::Task> next_task(uint64_t last_round_done, uint32_t wait_ms) = 0;
  // θ of `round`, checked against expected_fingerprint when given (e.g.
  // Task::params_fingerprint). With `held`, the coordinator may answer with a delta against it,
  // which the link decodes.
  virtual StatusOr<PulledParams> pull_params(uint64_t round,
                                             const std::string& expected_fingerprint = "",
                                             const HeldParams* held = nullptr) = 0;
  // Δ as raw fp32 (codec "none"). Returns the payload bytes sent.
  virtual StatusOr<uint64_t> push_update(const UpdateHeader& header,
                                         std::span<const float> delta) = 0;
  // An already-encoded payload (codec spec + numel it decodes to). Returns the bytes sent.
  virtual StatusOr<uint64_t> push_encoded(const UpdateHeader& header, const std::string& codec,
                                          uint64_t numel, const std::string& payload) = 0;
  virtual Status report_metrics(uint64_t round, uint64_t step,
                                const std::vector<std::pair<std::string, double>>& metrics) = 0;
  virtual Status leave(const std::string& reason) = 0;
  // Hydra: importance scores measured on θ of `round` (a SCORE task).
  virtual Status report_importance(const atoll_pb::v1::ImportanceReport& report) = 0;
};

}  // namespace atl::node
