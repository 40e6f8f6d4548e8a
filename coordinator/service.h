// The Coordinator gRPC service (transport/proto/atoll.proto) for ONE experiment: glue between
// gRPC and a RoundEngine (coordinator/round_engine.h), which holds the rounds. The service
// learns who is calling (mTLS certificate CN, or the insecure node name), turns tensor chunk
// streams (transport/tensor_stream.h) into engine calls and engine Status into grpc::Status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/engine_types.h"
#include "coordinator/experiment_config.h"
#include "coordinator/rate_limit.h"
#include "coordinator/round_engine.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/credentials.h"
#include "transport/tls/revocation.h"

namespace atl::coordinator {

// How the service learns who is calling.
enum class IdentitySource {
  // The CN of the verified mTLS client certificate (role must be "node"). Production.
  kTlsCertificate,
  // --insecure: Join takes JoinRequest.node_name; every later call carries the same name in
  // the "atoll-node" metadata entry. No authentication at all; local development only.
  kInsecureNodeName,
};

struct ServiceOptions {
  IdentitySource identity = IdentitySource::kInsecureNodeName;
  // The rest is the engine's (EngineOptions).
  // NextTask holds a call at most this long, whatever the node asks for (ms).
  uint32_t max_wait_ms = 30000;
  // Called for every Event, in order, on the engine's event thread. May be empty.
  std::function<void(const Event&)> on_event;
  // Empty: codec "none" only.
  PayloadDecoder decode;
  // The sites' tokenizer when the launch knows it (EngineOptions::tokenizer).
  std::optional<SiteTokenizer> tokenizer;
  // Slack over numel·4 bytes accepted for encoded payloads (headers of compressed codecs).
  uint64_t payload_slack_bytes = 1 << 16;
  // Where the service counts payload bytes and push latency (not owned; must outlive the
  // service). Null: not measured. Events reach metrics through on_event.
  CoordinatorMetrics* metrics = nullptr;
  // ReportMetrics per node: a node reports once per round; beyond this it gets
  // RESOURCE_EXHAUSTED before anything is parsed or stored.
  RateLimit metrics_rate{.burst = 20.0, .per_second = 5.0};
  // The CA's revocation list (mTLS only; null: none). Calls with a listed certificate are
  // refused (PERMISSION_DENIED), and a node whose certificate a new list revokes is dropped
  // from the experiment at once (RoundEngine::revoke_node).
  std::shared_ptr<transport::RevocationWatch> revocations;
};

class CoordinatorService final : public atoll_pb::v1::Coordinator::Service {
 public:
  // RoundEngine::open with the engine's part of `options`. The store must outlive the service.
  static StatusOr<std::unique_ptr<CoordinatorService>> open(Store& store,
                                                            const ExperimentConfig& config,
                                                            const algorithms::ParamSet& initial,
                                                            ServiceOptions options = {});
  ~CoordinatorService() override;

  RoundEngine& engine() { return *engine_; }
  const RoundEngine& engine() const { return *engine_; }

  // The engine's lifecycle and queries (round_engine.h).
  Status start() { return engine_->start(); }
  Status pause() { return engine_->pause(); }
  Status stop(const std::string& why) { return engine_->stop(why); }
  // Wakes every long-poll and refuses new calls (UNAVAILABLE); the server calls it before
  // grpc::Server::Shutdown so that no handler holds the shutdown up.
  void shutdown() { engine_->shutdown(); }
  const std::string& experiment_id() const { return engine_->experiment_id(); }
  ExperimentState state() const { return engine_->state(); }
  uint64_t current_round() const { return engine_->current_round(); }
  std::string params_fingerprint() const { return engine_->params_fingerprint(); }
  std::vector<float> params() const { return engine_->params(); }
  std::vector<NodeSnapshot> nodes() const { return engine_->nodes(); }
  StatusOr<ExperimentState> wait_until_finished(Clock::time_point deadline) const {
    return engine_->wait_until_finished(deadline);
  }
  bool wait_for_round(uint64_t round, Clock::time_point deadline) const {
    return engine_->wait_for_round(round, deadline);
  }
  std::vector<std::pair<std::string, std::string>> hydra_subnets() const {
    return engine_->hydra_subnets();
  }

  // The bulk lane's port (transport/bulk_lane.h), told to nodes in every JoinResponse; 0 = none.
  void set_bulk_port(uint32_t port) { bulk_port_.store(port); }

  // ---- A pull and a push, whichever transport carries their bytes: the gRPC streams below or
  // the bulk lane (coordinator/bulk_handler.h). `node` is the caller's node id. ----
  StatusOr<PullPlan> plan_pull(const std::string& node,
                               const atoll_pb::v1::PullParamsRequest& request, PullDigest digest);
  void pull_sent(const std::string& node, const PullPlan& plan);
  // Screens a push's header; returns a buffer to receive its payload into. Then exactly one of
  // abort_push / finish_push.
  StatusOr<std::string> begin_push(const std::string& node, const atoll_pb::v1::TensorHeader& h);
  // The most payload bytes a push with header `h` may carry (numel·4 + the codecs' slack).
  uint64_t max_push_bytes(const atoll_pb::v1::TensorHeader& h) const;
  void abort_push(const std::string& node, const atoll_pb::v1::TensorHeader& h, const Status& why);
  // `began`: when the push's header arrived (the push latency metric).
  StatusOr<atoll_pb::v1::PushUpdateResponse> finish_push(const std::string& node,
                                                        const atoll_pb::v1::TensorHeader& h,
                                                        std::string payload, Clock::time_point began);
  // The node a bulk lane caller is, from its verified certificate, checked as gRPC callers are
  // (shutting down, experiment id, role); PermissionDenied in --insecure mode.
  StatusOr<std::string> bulk_node(const transport::PeerIdentity& peer,
                                  const std::string& experiment_id) const;
  // OK unless the certificate was revoked (asked again while a transfer runs, so that a
  // revocation cuts a pull or push in flight).
  Status certificate_admitted(const transport::PeerIdentity& peer) const;
  // certificate_admitted for the caller of a gRPC stream, asked between its chunks; always OK
  // without a revocation list (the certificate is then not even read).
  std::function<Status()> stream_admission(const grpc::ServerContext& ctx) const;

  // ---- gRPC (see atoll.proto) ----
  grpc::Status Join(grpc::ServerContext* ctx, const atoll_pb::v1::JoinRequest* req,
                    atoll_pb::v1::JoinResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const atoll_pb::v1::HeartbeatRequest* req,
                         atoll_pb::v1::HeartbeatResponse* resp) override;
  grpc::Status NextTask(grpc::ServerContext* ctx, const atoll_pb::v1::NextTaskRequest* req,
                        atoll_pb::v1::Task* task) override;
  grpc::Status PullParams(grpc::ServerContext* ctx, const atoll_pb::v1::PullParamsRequest* req,
                          grpc::ServerWriter<atoll_pb::v1::TensorChunk>* writer) override;
  grpc::Status PushUpdate(grpc::ServerContext* ctx,
                          grpc::ServerReader<atoll_pb::v1::TensorChunk>* reader,
                          atoll_pb::v1::PushUpdateResponse* resp) override;
  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const atoll_pb::v1::MetricsReport* req,
                             atoll_pb::v1::MetricsAck* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const atoll_pb::v1::LeaveRequest* req,
                     atoll_pb::v1::LeaveResponse* resp) override;
  grpc::Status ReportImportance(grpc::ServerContext* ctx, const atoll_pb::v1::ImportanceReport* req,
                                atoll_pb::v1::ImportanceAck* resp) override;
  // Secure aggregation ([secagg], RoundEngine::advertise_keys and the rest).
  grpc::Status AdvertiseKeys(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggKeys* req,
                             atoll_pb::v1::SecAggRoster* resp) override;
  grpc::Status ShareKeys(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggShares* req,
                         atoll_pb::v1::SecAggShares* resp) override;
  grpc::Status AwaitUnmask(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggUnmaskPoll* req,
                           atoll_pb::v1::SecAggUnmaskTask* resp) override;
  grpc::Status RevealShares(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggReveal* req,
                            atoll_pb::v1::SecAggRevealAck* resp) override;

 private:
  CoordinatorService(IdentitySource identity, std::unique_ptr<RoundEngine> engine,
                     CoordinatorMetrics* metrics, RateLimit metrics_rate,
                     std::shared_ptr<transport::RevocationWatch> revocations)
      : identity_(identity),
        engine_(std::move(engine)),
        metrics_(metrics),
        metrics_limiter_(metrics_rate),
        revocations_(std::move(revocations)) {}

  // The node a verified certificate names (role "node", a valid node name, not revoked).
  // Remembers the certificate's serial under the node's name (serials_).
  StatusOr<std::string> node_of_certificate(const transport::PeerIdentity& id) const;
  // Drops every node whose last certificate is among `serials` (newly revoked).
  void certificates_revoked(const std::vector<std::string>& serials);
  // Identity of the caller (see IdentitySource); `join_name` only for Join.
  StatusOr<std::string> caller(const grpc::ServerContext& ctx, const std::string* join_name) const;
  // The checks every call but Join makes before the engine sees it, in the order nodes get
  // their errors: shutting down, experiment id, identity. Returns the caller's node id.
  StatusOr<std::string> node_of(const grpc::ServerContext& ctx,
                                const std::string& experiment_id) const;
  // Two processes under one node name (the same certificate started twice): the newest Join
  // wins. Each node process sends a random id of its own ("atoll-session" metadata) with every
  // call; Join records it, and a call that carries another one for that node is ABORTED with
  // "replaced by another process with the same name", which the older process stops on. A
  // process killed and started again joins at once, as before (docs/decisions.md). Calls
  // without the metadata (older nodes) are not checked.
  // Returns whether it replaced another process's id: the node's process restarted.
  bool record_session(const grpc::ServerContext& ctx, const std::string& node) const;
  Status check_session(const grpc::ServerContext& ctx, const std::string& node) const;

  // Receive buffers of finished pushes, reused by the next ones (an update is θ-sized; writing
  // it into fresh memory costs a page fault per 4 KiB, bench/transport). At most
  // kSparePushBuffers are kept: memory for one round's pushes from as many nodes at once.
  static constexpr size_t kSparePushBuffers = 2;
  std::string take_push_buffer();
  void keep_push_buffer(std::string buffer);

  const IdentitySource identity_;
  const std::unique_ptr<RoundEngine> engine_;
  CoordinatorMetrics* const metrics_;  // may be null
  RateLimiter metrics_limiter_;        // ReportMetrics, per node
  std::mutex push_buffers_mu_;         // guards push_buffers_
  std::vector<std::string> push_buffers_;
  std::atomic<uint32_t> bulk_port_{0};
  mutable std::mutex sessions_mu_;                       // guards sessions_
  mutable std::map<std::string, std::string> sessions_;  // node → its newest process's id
  const std::shared_ptr<transport::RevocationWatch> revocations_;  // may be null
  uint64_t revocation_listener_ = 0;
  mutable std::mutex serials_mu_;                       // guards serials_
  mutable std::map<std::string, std::string> serials_;  // node → serial of its last certificate
};

}  // namespace atl::coordinator
