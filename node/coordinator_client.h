// Node side of the coordinator protocol (transport/proto/atoll.proto): what a site worker
// (node/site_worker.h) needs from its coordinator, whatever carries the messages. It builds the
// requests, decodes θ pulls (full, exact or lossy deltas, bf16) and checks their fingerprints on
// top of the protocol's calls (node/coordinator_calls.h): over gRPC (mTLS, or plaintext in
// --insecure mode; node/grpc_coordinator_calls.h: every call has a deadline, failures are one
// clear line) or in memory (`atoll simulate`, simulate/in_process_calls.h).
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
// Thread-safe: the worker sends heartbeats from a side thread while its main thread trains, and
// Streaming DiLoCo pushes and pulls from a background thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/core/status.h"
#include "node/coordinator_calls.h"
#include "node/grpc_coordinator_calls.h"  // ClientOptions

namespace atl::node {

struct PulledParams {
  uint64_t round = 0;
  std::vector<float> values;  // numel fp32
  // The version's SHA-256: of `values`, verified, when exact; otherwise the version the
  // coordinator announced (values approximate it at bf16 precision, see docs/protocol.md).
  std::string fingerprint;
  std::string layout_fingerprint;  // as announced by the coordinator
  uint64_t bytes = 0;              // payload bytes received
  // "none" (full θ), "sparse-delta-exact", "sparse-delta", "bf16", "outer-update"
  std::string codec;
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

class CoordinatorClient {
 public:
  // Over gRPC.
  explicit CoordinatorClient(ClientOptions options);
  explicit CoordinatorClient(std::unique_ptr<CoordinatorCalls> calls);
  const std::string& target() const { return calls_->target(); }
  // Not to be read while another thread joins (the calls below read a locked copy).
  const std::string& experiment_id() const { return experiment_id_; }

  // node_name in `req` defaults to the calls' own (ClientOptions::node_name over gRPC).
  StatusOr<atoll_pb::v1::JoinResponse> join(atoll_pb::v1::JoinRequest req = {});
  StatusOr<bool> heartbeat(uint64_t round, uint32_t inner_step, double loss,
                           double tokens_per_s);
  StatusOr<atoll_pb::v1::Task> next_task(uint64_t last_round_done, uint32_t wait_ms);
  // The transport checks the chunks (CRC-32C, XXH3-128 of the payload); this checks the values'
  // SHA-256 fingerprint and, for a delta, the base it names.
  StatusOr<PulledParams> pull_params(uint64_t round, const std::string& expected_fingerprint = "",
                                     const HeldParams* held = nullptr);
  // Little-endian fp32.
  StatusOr<uint64_t> push_update(const UpdateHeader& header,
                                 std::span<const float> delta);
  StatusOr<uint64_t> push_encoded(const UpdateHeader& header, const std::string& codec,
                                  uint64_t numel, std::string_view payload);
  Status report_metrics(uint64_t round, uint64_t step,
                        const std::vector<std::pair<std::string, double>>& metrics);
  Status leave(const std::string& reason);
  Status report_importance(const atoll_pb::v1::ImportanceReport& report);
  // Secure aggregation's stages (node/secure_push.h); the experiment id is filled in.
  StatusOr<atoll_pb::v1::SecAggRoster> advertise_keys(atoll_pb::v1::SecAggKeys req);
  StatusOr<atoll_pb::v1::SecAggShares> share_keys(atoll_pb::v1::SecAggShares req);
  StatusOr<atoll_pb::v1::SecAggUnmaskTask> await_unmask(atoll_pb::v1::SecAggUnmaskPoll req);
  StatusOr<atoll_pb::v1::SecAggRevealAck> reveal_shares(atoll_pb::v1::SecAggReveal req);
  // The pause before retrying an unanswered call: CoordinatorCalls::wait_for_link.
  bool wait_for_link(std::chrono::milliseconds max_wait) { return calls_->wait_for_link(max_wait); }
  // The transport's wire time so far (CoordinatorCalls::transfer_totals).
  TransferTotals transfer_totals() const { return calls_->transfer_totals(); }
  // CoordinatorCalls::drop_connections (no other thread may use this client meanwhile).
  void drop_connections() { calls_->drop_connections(); }

  // The experiment the last Join answered for ("" before one): what the calls name.
  std::string current_experiment_id() const;
  // The calls' mTLS identity (CoordinatorCalls::identity); null without one.
  const transport::ClientIdentity* identity() const { return calls_->identity(); }

 private:

  // The receive buffer of the last pull, reused by the next one: θ-sized, kept between pulls
  // (writing a stream into fresh memory costs a page fault per 4 KiB; bench/transport).
  std::string take_pull_buffer();
  void keep_pull_buffer(std::string buffer);

  const std::unique_ptr<CoordinatorCalls> calls_;
  std::mutex pull_buffer_mu_;  // guards pull_buffer_
  std::string pull_buffer_;
  mutable std::mutex id_mu_;  // guards experiment_id_: join() runs while heartbeats go out
  std::string experiment_id_;
};

}  // namespace atl::node
