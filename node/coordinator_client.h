// Node side of the coordinator protocol (transport/proto/atoll.proto). Every call has a
// deadline; failures come back as Status values with one clear line, e.g.
// "coordinator at 10.0.0.5:7070 unreachable: failed to connect to all addresses".
//
// Typical loop (the trainer owns the model):
//   CoordinatorClient c({.target = "host:7070", .tls = *transport::client_credentials(dir, name)});
//   auto join = c.join(req);                               // model/train spec, heartbeat interval
//   for (;;) {
//     auto task = c.next_task(last_round_done, 10000);     // long-poll
//     if (task->kind() == Task::STOP) break;
//     if (task->kind() != Task::TRAIN) continue;
//     auto theta = c.pull_params(task->round(), task->params_fingerprint());
//     ... H inner steps from theta->values, Δ = θ − θ_local ...
//     c.push_update({.round = r, .tokens = n, .train_loss = l,
//                    .base_fingerprint = theta->fingerprint, .layout_fingerprint = lf}, delta);
//   }
//   c.leave("done");
// Heartbeats go from a separate thread every heartbeat_interval_ms (the client is thread-safe).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/status.h"
#include "node/coordinator_link.h"
#include "node/coordinator_calls.h"
#include "node/grpc_coordinator_calls.h"  // ClientOptions

namespace atl::node {

// The CoordinatorLink on top of the protocol's calls: over gRPC (mTLS, or plaintext in
// --insecure mode; node/grpc_coordinator_calls.h) or in memory (`atoll simulate`). Builds the
// requests, decodes θ pulls (full, exact or lossy deltas, bf16) and checks their fingerprints,
// whichever carries them. Thread-safe.
class CoordinatorClient : public CoordinatorLink {
 public:
  // Over gRPC.
  explicit CoordinatorClient(ClientOptions options);
  explicit CoordinatorClient(std::unique_ptr<CoordinatorCalls> calls);
  const std::string& target() const { return calls_->target(); }
  // Not to be read while another thread joins (the calls below read a locked copy).
  const std::string& experiment_id() const override { return experiment_id_; }

  // node_name in `req` defaults to the calls' own (ClientOptions::node_name over gRPC).
  StatusOr<atoll_pb::v1::JoinResponse> join(atoll_pb::v1::JoinRequest req = {}) override;
  StatusOr<bool> heartbeat(uint64_t round, uint32_t inner_step, double loss,
                           double tokens_per_s) override;
  StatusOr<atoll_pb::v1::Task> next_task(uint64_t last_round_done, uint32_t wait_ms) override;
  // The transport checks the chunks (CRC-32C, SHA-256 of the payload); this checks the values'
  // fingerprint and, for a delta, the base it names.
  StatusOr<PulledParams> pull_params(uint64_t round, const std::string& expected_fingerprint = "",
                                     const HeldParams* held = nullptr) override;
  // Little-endian fp32.
  StatusOr<uint64_t> push_update(const UpdateHeader& header,
                                 std::span<const float> delta) override;
  StatusOr<uint64_t> push_encoded(const UpdateHeader& header, const std::string& codec,
                                  uint64_t numel, const std::string& payload) override;
  Status report_metrics(uint64_t round, uint64_t step,
                        const std::vector<std::pair<std::string, double>>& metrics) override;
  Status leave(const std::string& reason) override;
  Status report_importance(const atoll_pb::v1::ImportanceReport& report) override;

 private:
  std::string current_experiment_id() const;

  const std::unique_ptr<CoordinatorCalls> calls_;
  mutable std::mutex id_mu_;  // guards experiment_id_: join() runs while heartbeats go out
  std::string experiment_id_;
};

}  // namespace atl::node
