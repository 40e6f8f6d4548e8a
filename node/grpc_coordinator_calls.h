// The coordinator protocol's calls over gRPC (mTLS, or plaintext in --insecure mode): what
// `atoll node` uses under its CoordinatorClient. Every call has a deadline; failures come back
// as Status values with one clear line (transport::explain_call_error), e.g. "coordinator at
// 10.0.0.5:7070 not reachable (connection refused)": kUnavailable for transport errors,
// kUnauthenticated for a certificate verdict. A failed Join also probes a cut TLS handshake for
// the verdict gRPC does not report (transport::explain_connect_failure). θ pulls and updates travel
// as chunk streams (transport/tensor_stream.h: ≤ 1 MiB chunks, CRC-32C each, XXH3-128 of the
// payload).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "node/coordinator_calls.h"
#include "transport/bulk_lane.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/credentials.h"

namespace atl::node {

struct ClientOptions {
  std::string target;        // coordinator "HOST:PORT"
  transport::ClientTls tls;  // transport::client_credentials(...) or insecure_client_credentials()
  // Identity in --insecure mode (sent with Join and as "atoll-node" metadata on every call).
  // With mTLS the coordinator takes the identity from the certificate instead.
  std::string node_name;
  // This process's id, sent as "atoll-session" metadata on every call: the coordinator tells an
  // older process under the same name that a newer one replaced it (ABORTED). "" = the process's
  // own, drawn once per process.
  std::string session;
  std::chrono::milliseconds rpc_timeout{10000};      // unary calls (+ wait_ms for NextTask)
  // PullParams / PushUpdate of a whole θ: at most this long in all (6 h: 1 GB at 400 kbit/s),
  // and cancelled as soon as no chunk moved for stall_timeout (a vanished peer, a link down).
  std::chrono::milliseconds stream_timeout{6 * 3600 * 1000};
  std::chrono::milliseconds stall_timeout{60000};
  // PushUpdate's answer after its last chunk: at most this long (screening, aggregation and a
  // commit the update completed come first: 7–17 s for 51.7M parameters). Without a bound a
  // connection that stopped carrying answers held the node silent for as long as stream_timeout.
  std::chrono::milliseconds answer_timeout{600000};
  uint64_t max_param_bytes = uint64_t{4} << 30;      // refuse a θ announced larger than this
  // Where the calls' own notices go (the bulk lane given up for gRPC); empty = stderr.
  std::function<void(const std::string&)> log;
};

// Thread-safe (gRPC stubs are).
class GrpcCoordinatorCalls final : public CoordinatorCalls {
 public:
  explicit GrpcCoordinatorCalls(ClientOptions options);

  const std::string& target() const override { return options_.target; }
  const transport::ClientIdentity* identity() const override {
    return options_.tls.identity.get();
  }
  // node_name in `req` defaults to options.node_name.
  Status join(const atoll_pb::v1::JoinRequest& req, atoll_pb::v1::JoinResponse* resp) override;
  Status heartbeat(const atoll_pb::v1::HeartbeatRequest& req,
                   atoll_pb::v1::HeartbeatResponse* resp) override;
  Status next_task(const atoll_pb::v1::NextTaskRequest& req, atoll_pb::v1::Task* task) override;
  Status pull_params(const atoll_pb::v1::PullParamsRequest& req,
                     atoll_pb::v1::TensorHeader* header, std::string* payload) override;
  // The header's wire_version, payload_bytes and payload_xxh3 are filled in here.
  Status push_update(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                     atoll_pb::v1::PushUpdateResponse* resp) override;
  Status report_metrics(const atoll_pb::v1::MetricsReport& req,
                        atoll_pb::v1::MetricsAck* ack) override;
  Status leave(const atoll_pb::v1::LeaveRequest& req, atoll_pb::v1::LeaveResponse* resp) override;
  Status report_importance(const atoll_pb::v1::ImportanceReport& req,
                           atoll_pb::v1::ImportanceAck* resp) override;
  Status advertise_keys(const atoll_pb::v1::SecAggKeys& req,
                        atoll_pb::v1::SecAggRoster* resp) override;
  Status share_keys(const atoll_pb::v1::SecAggShares& req,
                    atoll_pb::v1::SecAggShares* resp) override;
  Status await_unmask(const atoll_pb::v1::SecAggUnmaskPoll& req,
                      atoll_pb::v1::SecAggUnmaskTask* resp) override;
  Status reveal_shares(const atoll_pb::v1::SecAggReveal& req,
                       atoll_pb::v1::SecAggRevealAck* resp) override;
  // Watches the channel's connectivity state until it is READY. Watching also polls the channel
  // from this thread: with no call in flight, nothing else would drive a new connection's TLS
  // handshake but gRPC's backup poller, every 5 s (that, and gRPC's default reconnect backoff,
  // kept nodes 16 s away from a coordinator restarted in 0.5 s).
  bool wait_for_link(std::chrono::milliseconds max_wait) override;
  TransferTotals transfer_totals() const override;
  // New channels (and stubs) in place of the old ones, whose connections close.
  void drop_connections() override;

 private:
  void prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const;
  Status from_grpc(const grpc::Status& s, const char* rpc, std::chrono::milliseconds timeout) const;
  // UNAVAILABLE for a stream the StallWatchdog cancelled (the caller retries, joining again).
  Status stalled(const char* rpc) const;

  ClientOptions options_;
  mutable std::mutex transfer_mu_;  // guards transfers_: pulls and pushes run on several threads
  TransferTotals transfers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<atoll_pb::v1::Coordinator::Stub> stub_;
  // PullParams and PushUpdate on a connection of their own: on a slow link a heartbeat sent on
  // the same connection waited behind θ in the socket buffer longer than the loss window, the
  // node was marked lost mid-transfer and the round redone, for ever (0 rounds in 600 s at
  // 100 kbit/s). Apart, the link's queue interleaves them.
  std::shared_ptr<grpc::Channel> stream_channel_;
  std::unique_ptr<atoll_pb::v1::Coordinator::Stub> stream_stub_;
  // The coordinator's bulk lane, when its JoinResponse offered one (TLS only); pulls and pushes
  // go there. Dropped, with one line on stderr, the first time it cannot be reached at all:
  // they stay on gRPC from then on.
  mutable std::mutex bulk_mu_;  // guards bulk_
  std::shared_ptr<transport::BulkLaneClient> bulk_;
  std::shared_ptr<transport::BulkLaneClient> bulk_lane() const;
  // Drops `lane` (if still the current one) after it could not be reached.
  void drop_bulk_lane(const std::shared_ptr<transport::BulkLaneClient>& lane, const Status& why);
};

}  // namespace atl::node
