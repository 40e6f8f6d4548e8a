// The coordinator protocol's calls (transport/proto/atoll.proto) as a node makes them: one
// method per RPC, protobuf messages in and out. The same messages travel over mTLS gRPC
// (node/grpc_coordinator_calls.h, `atoll node`) or stay in memory (simulate/in_process_calls.h,
// `atoll simulate`); CoordinatorClient builds the requests and checks the answers on top of
// either, so a simulated site and a real one differ only below this interface.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"
#include "transport/tls/credentials.h"

namespace atl::node {

// Payload bytes and wall seconds of the tensor streams a transport carried (every θ pull and
// update push that completed). Pull: from the call to the last chunk received. Push: from the
// call to the last chunk written into the flow-controlled stream (at most one HTTP/2 window is
// still in flight then), and separately the wait for the coordinator's answer after it (its
// checks of the whole update and, for the update that completes a round, the round's commit).
struct TransferTotals {
  uint64_t pull_bytes = 0, push_bytes = 0;
  double pull_seconds = 0, push_seconds = 0, push_answer_seconds = 0;
};

class CoordinatorCalls {
 public:
  virtual ~CoordinatorCalls() = default;
  // Where the calls go, for messages: "HOST:PORT" or "in-process coordinator".
  virtual const std::string& target() const = 0;
  // The mTLS identity the calls are made with (its certificate and key, the experiment CA); null
  // without one (--insecure, in-process calls). Secure aggregation signs and checks key
  // advertisements with it.
  virtual const transport::ClientIdentity* identity() const { return nullptr; }

  virtual Status join(const atoll_pb::v1::JoinRequest& req, atoll_pb::v1::JoinResponse* resp) = 0;
  virtual Status heartbeat(const atoll_pb::v1::HeartbeatRequest& req,
                           atoll_pb::v1::HeartbeatResponse* resp) = 0;
  // Long-poll: answers within req.wait_ms (capped by the coordinator) plus the call's timeout.
  virtual Status next_task(const atoll_pb::v1::NextTaskRequest& req, atoll_pb::v1::Task* task) = 0;
  // θ (or a delta against the θ the request names) as its header and whole payload; a chunked
  // transport assembles and checks the chunks (CRC-32C, XXH3-128) before returning. θ's SHA-256
  // fingerprint is the caller's to check. `payload`'s old contents are dropped; a transport may
  // assemble into its memory (a caller that passes the previous payload back spares fresh
  // pages).
  virtual Status pull_params(const atoll_pb::v1::PullParamsRequest& req,
                             atoll_pb::v1::TensorHeader* header, std::string* payload) = 0;
  // One update: `header` (codec, numel, round, fingerprints, tokens) and its encoded payload
  // (a view: a raw fp32 update is sent straight from the node's Δ, no θ-sized copy per round).
  virtual Status push_update(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                             atoll_pb::v1::PushUpdateResponse* resp) = 0;
  virtual Status report_metrics(const atoll_pb::v1::MetricsReport& req,
                                atoll_pb::v1::MetricsAck* ack) = 0;
  virtual Status leave(const atoll_pb::v1::LeaveRequest& req, atoll_pb::v1::LeaveResponse* resp) = 0;
  virtual Status report_importance(const atoll_pb::v1::ImportanceReport& req,
                                   atoll_pb::v1::ImportanceAck* resp) = 0;
  // Secure aggregation (TrainSpec.secagg): the stages around a masked push. The long-polls
  // (advertise_keys, share_keys, await_unmask) answer within req.wait_ms plus the call's timeout.
  virtual Status advertise_keys(const atoll_pb::v1::SecAggKeys& req,
                                atoll_pb::v1::SecAggRoster* resp) = 0;
  virtual Status share_keys(const atoll_pb::v1::SecAggShares& req,
                            atoll_pb::v1::SecAggShares* resp) = 0;
  virtual Status await_unmask(const atoll_pb::v1::SecAggUnmaskPoll& req,
                              atoll_pb::v1::SecAggUnmaskTask* resp) = 0;
  virtual Status reveal_shares(const atoll_pb::v1::SecAggReveal& req,
                               atoll_pb::v1::SecAggRevealAck* resp) = 0;

  // The pause between two attempts to reach a coordinator that did not answer: returns true as
  // soon as the link to it comes up (a transport that reconnects in the background), false after
  // `max_wait` (at once when `max_wait` is 0). A link that was up already does not count: the
  // failure was not the link's, and the caller backs off the whole `max_wait`. Default: sleeps.
  virtual bool wait_for_link(std::chrono::milliseconds max_wait) {
    std::this_thread::sleep_for(max_wait);
    return false;
  }
  // Totals since construction, safe to read from any thread; a transport without a wire (in
  // memory) reports zeros.
  virtual TransferTotals transfer_totals() const { return {}; }
  // Closes this transport's connections; the next call opens new ones. Only while no other
  // thread uses this object (a site waiting for a seat before its first Join). Default: none.
  virtual void drop_connections() {}
};

}  // namespace atl::node
