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

// The CoordinatorLink over gRPC (mTLS, or plaintext in --insecure mode). Thread-safe.
class CoordinatorClient : public CoordinatorLink {
 public:
  explicit CoordinatorClient(ClientOptions options);
  const std::string& target() const { return options_.target; }
  // Not to be read while another thread joins (the calls below read a locked copy).
  const std::string& experiment_id() const override { return experiment_id_; }

  // node_name in `req` defaults to options.node_name.
  StatusOr<atoll_pb::v1::JoinResponse> join(atoll_pb::v1::JoinRequest req = {}) override;
  StatusOr<bool> heartbeat(uint64_t round, uint32_t inner_step, double loss,
                           double tokens_per_s) override;
  StatusOr<atoll_pb::v1::Task> next_task(uint64_t last_round_done, uint32_t wait_ms) override;
  // Checked on arrival: CRC-32C per chunk, SHA-256 of the payload, fingerprint of the values.
  StatusOr<PulledParams> pull_params(uint64_t round, const std::string& expected_fingerprint = "",
                                     const HeldParams* held = nullptr) override;
  // Little-endian fp32, chunked ≤ 1 MiB.
  StatusOr<uint64_t> push_update(const UpdateHeader& header,
                                 std::span<const float> delta) override;
  StatusOr<uint64_t> push_encoded(const UpdateHeader& header, const std::string& codec,
                                  uint64_t numel, const std::string& payload) override;
  Status report_metrics(uint64_t round, uint64_t step,
                        const std::vector<std::pair<std::string, double>>& metrics) override;
  Status leave(const std::string& reason) override;
  Status report_importance(const atoll_pb::v1::ImportanceReport& report) override;

 private:
  void prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const;
  Status from_grpc(const grpc::Status& s, const char* rpc, std::chrono::milliseconds timeout) const;
  std::string current_experiment_id() const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<atoll_pb::v1::Coordinator::Stub> stub_;
  mutable std::mutex id_mu_;  // guards experiment_id_: join() runs while heartbeats go out
  std::string experiment_id_;
};

}  // namespace atl::node
