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
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/status.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/credentials.h"

namespace atl::node {

struct ClientOptions {
  std::string target;        // coordinator "HOST:PORT"
  transport::ClientTls tls;  // transport::client_credentials(...) or insecure_client_credentials()
  // Identity in --insecure mode (sent with Join and as "atoll-node" metadata on every call).
  // With mTLS the coordinator takes the identity from the certificate instead.
  std::string node_name;
  std::chrono::milliseconds rpc_timeout{10000};      // unary calls (+ wait_ms for NextTask)
  std::chrono::milliseconds stream_timeout{300000};  // PullParams / PushUpdate of a whole θ
  uint64_t max_param_bytes = uint64_t{4} << 30;      // refuse a θ announced larger than this
};

struct PulledParams {
  uint64_t round = 0;
  std::vector<float> values;       // numel fp32
  // The version's SHA-256: of `values`, verified, when exact; otherwise the version the
  // coordinator announced (values approximate it at bf16 precision, see docs/protocol.md).
  std::string fingerprint;
  std::string layout_fingerprint;  // as announced by the coordinator
  uint64_t bytes = 0;              // payload bytes received
  std::string codec;  // "none" (full θ), "sparse-delta-exact", "sparse-delta", "bf16"
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
  explicit CoordinatorClient(ClientOptions options);
  const std::string& target() const { return options_.target; }
  // Set by join(); later calls carry it.
  const std::string& experiment_id() const { return experiment_id_; }

  // node_name in `req` defaults to options.node_name.
  StatusOr<atoll_pb::v1::JoinResponse> join(atoll_pb::v1::JoinRequest req = {});
  // false: the coordinator does not know this node (lost, restarted): join() again.
  StatusOr<bool> heartbeat(uint64_t round, uint32_t inner_step, double loss, double tokens_per_s);
  // Long-poll for up to wait_ms (the coordinator caps it).
  StatusOr<atoll_pb::v1::Task> next_task(uint64_t last_round_done, uint32_t wait_ms);
  // θ of `round`, assembled and checked (CRC-32C per chunk, SHA-256 of the payload, fingerprint
  // of the values; expected_fingerprint too when given, e.g. Task::params_fingerprint). With
  // `held`, the coordinator may answer with a delta against it, which is decoded here.
  StatusOr<PulledParams> pull_params(uint64_t round, const std::string& expected_fingerprint = "",
                                     const HeldParams* held = nullptr);
  // Δ as raw little-endian fp32 (codec "none"), chunked ≤ 1 MiB. Returns payload bytes sent.
  StatusOr<uint64_t> push_update(const UpdateHeader& header, std::span<const float> delta);
  // An already-encoded payload (codec spec + numel it decodes to).
  StatusOr<uint64_t> push_encoded(const UpdateHeader& header, const std::string& codec,
                                  uint64_t numel, const std::string& payload);
  Status report_metrics(uint64_t round, uint64_t step,
                        const std::vector<std::pair<std::string, double>>& metrics);
  Status leave(const std::string& reason);
  // Hydra: importance scores measured on θ of `round` (a SCORE task).
  Status report_importance(const atoll_pb::v1::ImportanceReport& report);

 private:
  void prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const;
  Status from_grpc(const grpc::Status& s, const char* rpc, std::chrono::milliseconds timeout) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<atoll_pb::v1::Coordinator::Stub> stub_;
  std::string experiment_id_;
};

}  // namespace atl::node
