// CoordinatorService: gRPC glue over the RoundEngine (identity, chunk streams, status codes).
#include "coordinator/service.h"

#include <grpcpp/server_context.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "transport/bulk_lane.h"
#include "transport/grpc_status.h"
#include "transport/tensor_stream.h"
#include "transport/tls/credentials.h"

namespace atl::coordinator {
namespace pb = atoll_pb::v1;
using transport::to_grpc;

namespace {

constexpr char kNodeMetadata[] = "atoll-node";
constexpr char kSessionMetadata[] = "atoll-session";

// The caller's process id ("" when it sends none).
std::string session_of(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kSessionMetadata);
  if (it == md.end()) return "";
  return std::string(it->second.data(), std::min<size_t>(it->second.size(), 64));
}

}  // namespace

bool CoordinatorService::record_session(const grpc::ServerContext& ctx,
                                        const std::string& node) const {
  const std::string session = session_of(ctx);
  if (session.empty()) return false;
  std::lock_guard<std::mutex> lock(sessions_mu_);
  std::string& known = sessions_[node];
  const bool replaced = !known.empty() && known != session;
  known = session;
  return replaced;
}

Status CoordinatorService::check_session(const grpc::ServerContext& ctx,
                                         const std::string& node) const {
  const std::string session = session_of(ctx);
  if (session.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(sessions_mu_);
  // A restarted coordinator knows no process yet: the first one to call is taken as the node's.
  auto [it, inserted] = sessions_.emplace(node, session);
  if (inserted || it->second == session) return Status::Ok();
  return Aborted("replaced by another process with the same name: node '" + node +
                 "' joined again from another process, which takes part from now on; stop this "
                 "one, or give it a certificate of its own");
}

StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::open(
    Store& store, const ExperimentConfig& config, const algorithms::ParamSet& initial,
    ServiceOptions options) {
  EngineOptions eo;
  eo.max_wait_ms = options.max_wait_ms;
  eo.on_event = std::move(options.on_event);
  eo.decode = std::move(options.decode);
  eo.tokenizer = std::move(options.tokenizer);
  eo.payload_slack_bytes = options.payload_slack_bytes;
  ATOLL_ASSIGN_OR_RETURN(std::unique_ptr<RoundEngine> engine,
                         RoundEngine::open(store, config, initial, std::move(eo)));
  std::unique_ptr<CoordinatorService> service(
      new CoordinatorService(options.identity, std::move(engine), options.metrics,
                             options.metrics_rate, options.revocations));
  if (service->revocations_)
    service->revocation_listener_ = service->revocations_->add_listener(
        [raw = service.get()](const std::vector<std::string>& serials) {
          raw->certificates_revoked(serials);
        });
  return service;
}

CoordinatorService::~CoordinatorService() {
  if (revocations_) revocations_->remove_listener(revocation_listener_);
}

Status CoordinatorService::certificate_admitted(const transport::PeerIdentity& peer) const {
  return revocations_ ? revocations_->check(peer.name, peer.serial_hex) : Status::Ok();
}

std::function<Status()> CoordinatorService::stream_admission(const grpc::ServerContext& ctx) const {
  if (!revocations_ || identity_ != IdentitySource::kTlsCertificate)
    return [] { return Status::Ok(); };
  auto peer = transport::peer_identity(ctx);
  if (!peer.ok()) return [st = peer.status()] { return st; };
  return [this, peer = std::move(*peer)] { return certificate_admitted(peer); };
}

void CoordinatorService::certificates_revoked(const std::vector<std::string>& serials) {
  std::vector<std::pair<std::string, std::string>> dropped;  // node, serial
  {
    std::lock_guard<std::mutex> lock(serials_mu_);
    for (const std::string& serial : serials)
      for (const auto& [node, known] : serials_)
        if (known == serial) dropped.emplace_back(node, serial);
  }
  // A call already under way (a long-poll) gets the same line as the certificate's next call.
  for (const auto& [node, serial] : dropped)
    engine_->revoke_node(node,
                         "certificate serial " + serial + " revoked by " + revocations_->path(),
                         revocations_->check(node, serial).message());
}

StatusOr<std::string> CoordinatorService::caller(const grpc::ServerContext& ctx,
                                                 const std::string* join_name) const {
  std::string name;
  if (identity_ == IdentitySource::kTlsCertificate) {
    ATOLL_ASSIGN_OR_RETURN(transport::PeerIdentity id, transport::peer_identity(ctx));
    return node_of_certificate(id);
  } else if (join_name) {
    name = *join_name;
  } else {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kNodeMetadata);
    if (it == md.end())
      return Unauthenticated("call carries no node identity (insecure mode: set the '" +
                             std::string(kNodeMetadata) + "' metadata to the joined node name)");
    name.assign(it->second.data(), it->second.size());
  }
  ATOLL_RETURN_IF_ERROR(check_node_name(name));
  return name;
}

StatusOr<std::string> CoordinatorService::node_of_certificate(
    const transport::PeerIdentity& id) const {
  if (id.role != "node")
    return PermissionDenied("certificate '" + id.name + "' has role '" + id.role +
                            "'; nodes need a certificate issued with --role node");
  ATOLL_RETURN_IF_ERROR(check_node_name(id.name));
  if (revocations_) {
    // Remembered before the check: a list that arrives between the two either refuses this
    // call or finds the serial here (certificates_revoked), never neither.
    {
      std::lock_guard<std::mutex> lock(serials_mu_);
      serials_[id.name] = id.serial_hex;
    }
    ATOLL_RETURN_IF_ERROR(revocations_->check(id.name, id.serial_hex));
  }
  return id.name;
}

StatusOr<std::string> CoordinatorService::bulk_node(const transport::PeerIdentity& peer,
                                                    const std::string& experiment_id) const {
  ATOLL_RETURN_IF_ERROR(engine_->admits(experiment_id));
  if (identity_ != IdentitySource::kTlsCertificate)
    return PermissionDenied("the bulk lane needs mTLS; this coordinator runs --insecure");
  return node_of_certificate(peer);
}

StatusOr<std::string> CoordinatorService::node_of(const grpc::ServerContext& ctx,
                                                  const std::string& experiment_id) const {
  ATOLL_RETURN_IF_ERROR(engine_->admits(experiment_id));
  ATOLL_ASSIGN_OR_RETURN(std::string node, caller(ctx, nullptr));
  ATOLL_RETURN_IF_ERROR(check_session(ctx, node));
  return node;
}

grpc::Status CoordinatorService::Join(grpc::ServerContext* ctx, const pb::JoinRequest* req,
                                      pb::JoinResponse* resp) {
  auto id = caller(*ctx, &req->node_name());
  if (!id.ok()) return to_grpc(id.status());
  auto r = engine_->join(*id, *req);
  // The engine's OUT_OF_RANGE for Join is the diloco.max_nodes limit: gRPC's RESOURCE_EXHAUSTED
  // (which clients read back as OUT_OF_RANGE).
  if (!r.ok() && r.status().code() == StatusCode::kOutOfRange)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, r.status().message());
  if (!r.ok()) return to_grpc(r.status());
  // A join with another process id than the node's last one: the process restarted.
  if (record_session(*ctx, *id)) engine_->node_process_restarted(*id);
  *resp = std::move(*r);
  resp->set_bulk_port(transport::reads_bulk_lane(*req) ? bulk_port_.load() : 0);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const pb::HeartbeatRequest* req,
                                           pb::HeartbeatResponse* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  auto r = engine_->heartbeat(*id, *req);
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

namespace {

// A long-poll's wait_ms, never past the node's own RPC deadline (system clock), so that the
// answer still reaches it.
uint32_t wait_within_deadline(const grpc::ServerContext& ctx, uint32_t wait_ms) {
  const auto call_deadline = ctx.deadline();
  if (call_deadline == std::chrono::system_clock::time_point::max()) return wait_ms;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        call_deadline - std::chrono::system_clock::now()) -
                    std::chrono::milliseconds(50);
  const int64_t left_ms = std::max<int64_t>(0, left.count());
  return left_ms < wait_ms ? static_cast<uint32_t>(left_ms) : wait_ms;
}

}  // namespace

grpc::Status CoordinatorService::NextTask(grpc::ServerContext* ctx, const pb::NextTaskRequest* req,
                                          pb::Task* task) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  pb::NextTaskRequest capped = *req;
  capped.set_wait_ms(wait_within_deadline(*ctx, req->wait_ms()));
  auto r = engine_->next_task(*id, capped, [ctx] { return ctx->IsCancelled(); });
  if (!r.ok()) return to_grpc(r.status());
  *task = std::move(*r);
  return grpc::Status::OK;
}

StatusOr<PullPlan> CoordinatorService::plan_pull(const std::string& node,
                                                 const pb::PullParamsRequest& request,
                                                 PullDigest digest) {
  ATOLL_ASSIGN_OR_RETURN(PullPlan plan, engine_->pull(node, request, digest));
  // Cached per θ or encoding; empty (kIfKnown): the transport hashes the payload as it sends it.
  plan.header.set_payload_xxh3(plan.payload_digest);
  plan.header.set_payload_bytes(plan.payload.size());
  plan.header.set_wire_version(transport::kWireVersion);
  return plan;
}

void CoordinatorService::pull_sent(const std::string& node, const PullPlan& plan) {
  engine_->pull_delivered(node, plan.header.round(), plan.payload.size());
  if (metrics_) metrics_->add_bytes_down(plan.payload.size());
}

StatusOr<std::string> CoordinatorService::begin_push(const std::string& node,
                                                     const pb::TensorHeader& h) {
  ATOLL_RETURN_IF_ERROR(engine_->begin_update(node, h));
  return take_push_buffer();
}

uint64_t CoordinatorService::max_push_bytes(const pb::TensorHeader& h) const {
  // Bounded by the screened header (numel·4, or + slack for encoded codecs).
  return h.numel() * sizeof(float) + engine_->options().payload_slack_bytes;
}

void CoordinatorService::abort_push(const std::string& node, const pb::TensorHeader& h,
                                    const Status& why) {
  engine_->abort_update(node, h, why);
}

StatusOr<pb::PushUpdateResponse> CoordinatorService::finish_push(const std::string& node,
                                                                const pb::TensorHeader& h,
                                                                std::string payload,
                                                                Clock::time_point began) {
  const auto payload_done_at = Clock::now();
  if (metrics_) metrics_->add_bytes_up(payload.size());
  auto r = engine_->finish_update(node, h, payload);
  keep_push_buffer(std::move(payload));
  if (r.ok() && metrics_)
    metrics_->observe_push(std::chrono::duration<double>(Clock::now() - began).count());
  // Both lanes: the node times its upload as its call less this.
  if (r.ok())
    r->set_seconds_after_payload(
        std::chrono::duration<double>(Clock::now() - payload_done_at).count());
  return r;
}

grpc::Status CoordinatorService::PullParams(grpc::ServerContext* ctx,
                                            const pb::PullParamsRequest* req,
                                            grpc::ServerWriter<pb::TensorChunk>* writer) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  auto plan = plan_pull(*id, *req, PullDigest::kUpFront);  // in the first chunk's header
  if (!plan.ok()) return to_grpc(plan.status());
  const std::function<Status()> admitted = stream_admission(*ctx);
  Status st = transport::for_each_chunk(
      plan->header, plan->payload,
      [&](const pb::TensorChunk& c) -> Status {
        if (ctx->IsCancelled()) return Unavailable("PullParams cancelled by the node");
        ATOLL_RETURN_IF_ERROR(admitted());  // revoked meanwhile
        if (!writer->Write(c)) return Unavailable("node '" + *id + "' went away during PullParams");
        return Status::Ok();
      },
      transport::kStreamChunkBytes);
  if (!st.ok()) return to_grpc(st);
  pull_sent(*id, *plan);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::PushUpdate(grpc::ServerContext* ctx,
                                            grpc::ServerReader<pb::TensorChunk>* reader,
                                            pb::PushUpdateResponse* resp) {
  pb::TensorChunk first;
  if (!reader->Read(&first))
    return to_grpc(
        InvalidArgument("PushUpdate: empty stream (the first chunk carries the header)"));
  const auto first_chunk_at = Clock::now();
  if (!first.has_header())
    return to_grpc(InvalidArgument("PushUpdate: the first chunk has no header"));
  const pb::TensorHeader& h = first.header();
  auto id = node_of(*ctx, h.experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  auto buffer = begin_push(*id, h);
  if (!buffer.ok()) return to_grpc(buffer.status());
  transport::ChunkAssembler assembler(max_push_bytes(h), std::move(*buffer));
  Status st = assembler.add(first);
  const std::function<Status()> admitted = stream_admission(*ctx);
  pb::TensorChunk chunk;
  while (st.ok() && reader->Read(&chunk)) {
    st = assembler.add(chunk);
    if (st.ok()) st = admitted();  // revoked meanwhile
  }
  if (st.ok() && ctx->IsCancelled()) st = Unavailable("PushUpdate cancelled by the node");
  if (st.ok()) st = assembler.finish();
  if (!st.ok()) {
    abort_push(*id, h, st);
    return to_grpc(st);
  }
  auto r = finish_push(*id, h, assembler.take_payload(), first_chunk_at);
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

std::string CoordinatorService::take_push_buffer() {
  std::lock_guard<std::mutex> lk(push_buffers_mu_);
  if (push_buffers_.empty()) return {};
  std::string buffer = std::move(push_buffers_.back());
  push_buffers_.pop_back();
  return buffer;
}

void CoordinatorService::keep_push_buffer(std::string buffer) {
  std::lock_guard<std::mutex> lk(push_buffers_mu_);
  if (push_buffers_.size() < kSparePushBuffers) push_buffers_.push_back(std::move(buffer));
}

grpc::Status CoordinatorService::ReportMetrics(grpc::ServerContext* ctx,
                                               const pb::MetricsReport* req, pb::MetricsAck*) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  if (!metrics_limiter_.allow(*id)) {
    const RateLimit& l = metrics_limiter_.limit();
    char why[200];
    std::snprintf(why, sizeof(why),
                  "metrics from '%s' refused: more than %.0f reports at once or %.1f a second "
                  "(nodes report once per round)",
                  id->c_str(), l.burst, l.per_second);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why);
  }
  const Status st = engine_->report_metrics(*id, *req);
  // The engine's OUT_OF_RANGE is the per-round report count: RESOURCE_EXHAUSTED on the wire.
  if (st.code() == StatusCode::kOutOfRange)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, st.message());
  return to_grpc(st);
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext* ctx, const pb::LeaveRequest* req,
                                       pb::LeaveResponse*) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  return to_grpc(engine_->leave(*id, *req));
}

grpc::Status CoordinatorService::ReportImportance(grpc::ServerContext* ctx,
                                                  const pb::ImportanceReport* req,
                                                  pb::ImportanceAck* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  const Status st = engine_->report_importance(*id, *req);
  resp->set_accepted(st.ok());
  if (!st.ok()) resp->set_message(st.message());
  return to_grpc(st);
}

grpc::Status CoordinatorService::AdvertiseKeys(grpc::ServerContext* ctx, const pb::SecAggKeys* req,
                                               pb::SecAggRoster* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  pb::SecAggKeys capped = *req;
  capped.set_wait_ms(wait_within_deadline(*ctx, req->wait_ms()));
  // The certificate of the handshake goes to the other sites with the signed keys (none without
  // mTLS): they check the signature against the experiment CA themselves.
  auto peer = transport::peer_identity(*ctx);
  auto r = engine_->advertise_keys(*id, capped, peer.ok() ? peer->certificate_pem : "");
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ShareKeys(grpc::ServerContext* ctx, const pb::SecAggShares* req,
                                           pb::SecAggShares* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  pb::SecAggShares capped = *req;
  capped.set_wait_ms(wait_within_deadline(*ctx, req->wait_ms()));
  auto r = engine_->share_keys(*id, capped);
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::AwaitUnmask(grpc::ServerContext* ctx,
                                             const pb::SecAggUnmaskPoll* req,
                                             pb::SecAggUnmaskTask* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  pb::SecAggUnmaskPoll capped = *req;
  capped.set_wait_ms(wait_within_deadline(*ctx, req->wait_ms()));
  auto r = engine_->await_unmask(*id, capped);
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RevealShares(grpc::ServerContext* ctx,
                                              const pb::SecAggReveal* req,
                                              pb::SecAggRevealAck* resp) {
  auto id = node_of(*ctx, req->experiment_id());
  if (!id.ok()) return to_grpc(id.status());
  auto r = engine_->reveal_shares(*id, *req);
  if (!r.ok()) return to_grpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

}  // namespace atl::coordinator
