#include "node/grpc_coordinator_calls.h"

#include <grpcpp/client_context.h>

#include <cstdio>
#include <random>
#include <thread>

#include "transport/channel.h"
#include "transport/stall_watchdog.h"
#include "transport/tensor_stream.h"
#include "transport/tls/tls_socket.h"

namespace atl::node {
namespace pb = atoll_pb::v1;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
constexpr char kNodeMetadata[] = "atoll-node";
constexpr char kSessionMetadata[] = "atoll-session";

// This process's id: 128 random bits as hex, drawn once, so that every client of the process
// (one per site, or a new one after a reconnect) is the same process to the coordinator.
const std::string& process_session() {
  static const std::string id = [] {
    std::random_device rd;
    char text[33];
    std::snprintf(text, sizeof(text), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    return std::string(text);
  }();
  return id;
}
}

GrpcCoordinatorCalls::GrpcCoordinatorCalls(ClientOptions options)
    : options_(std::move(options)),
      channel_(transport::create_channel(options_.target, options_.tls)),
      stub_(pb::Coordinator::NewStub(channel_)),
      stream_channel_(transport::create_channel(options_.target, options_.tls, "streams")),
      stream_stub_(pb::Coordinator::NewStub(stream_channel_)) {
  if (options_.session.empty()) options_.session = process_session();
}

void GrpcCoordinatorCalls::drop_connections() {
  stub_.reset();
  stream_stub_.reset();
  channel_ = transport::create_channel(options_.target, options_.tls);
  stub_ = pb::Coordinator::NewStub(channel_);
  stream_channel_ = transport::create_channel(options_.target, options_.tls, "streams");
  stream_stub_ = pb::Coordinator::NewStub(stream_channel_);
}

void GrpcCoordinatorCalls::prepare(grpc::ClientContext& ctx,
                                   std::chrono::milliseconds timeout) const {
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!options_.node_name.empty()) ctx.AddMetadata(kNodeMetadata, options_.node_name);
  ctx.AddMetadata(kSessionMetadata, options_.session);
}

Status GrpcCoordinatorCalls::stalled(const char* rpc) const {
  return Unavailable("coordinator at " + options_.target + ": nothing moved on " + rpc + " for " +
                     std::to_string(options_.stall_timeout.count() / 1000) +
                     " s (the link is down, or this machine's address changed); it is tried "
                     "again");
}

Status GrpcCoordinatorCalls::from_grpc(const grpc::Status& s, const char* rpc,
                                    std::chrono::milliseconds timeout) const {
  if (s.ok()) return Status::Ok();
  const std::string& t = options_.target;
  const std::string msg = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // Connection-level failures (connection refused, a cut handshake, a certificate verdict)
      // get one actionable line.
      return transport::explain_call_error(s, t, options_.tls, "coordinator at " + t);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status(StatusCode::kDeadlineExceeded, "coordinator at " + t + " did not answer " +
                                                       rpc + " within " +
                                                       std::to_string(timeout.count()) + " ms");
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(std::string(rpc) + " rejected by " + t + ": " + msg);
    case grpc::StatusCode::NOT_FOUND:
      return NotFound(std::string(rpc) + ": " + msg);
    case grpc::StatusCode::ALREADY_EXISTS:
      return AlreadyExists(std::string(rpc) + " rejected: " + msg);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return FailedPrecondition(std::string(rpc) + " rejected: " + msg);
    case grpc::StatusCode::OUT_OF_RANGE:
      return OutOfRange(std::string(rpc) + " rejected: " + msg);
    case grpc::StatusCode::PERMISSION_DENIED:
      return PermissionDenied("coordinator at " + t + " refused " + rpc + ": " + msg);
    case grpc::StatusCode::ABORTED:  // another process took over this node's name
      return Aborted(msg);
    case grpc::StatusCode::UNAUTHENTICATED:
      return Unauthenticated("coordinator at " + t + " did not accept our identity: " + msg);
    case grpc::StatusCode::DATA_LOSS:
      return DataLoss(std::string(rpc) + ": " + msg);
    case grpc::StatusCode::CANCELLED:
      // The coordinator shut down with the call in flight (this side cancels only streams it
      // already failed, and reports their own error).
      return Unavailable("coordinator at " + t + " cancelled " + rpc + " (" + msg +
                         "): it is shutting down or restarting");
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Unavailable("coordinator at " + t + " refused " + rpc + ": " + msg);
    default:
      return Internal(std::string(rpc) + " to " + t + " failed (" +
                      std::to_string(static_cast<int>(s.error_code())) + "): " + msg);
  }
}

Status GrpcCoordinatorCalls::join(const pb::JoinRequest& req, pb::JoinResponse* resp) {
  pb::JoinRequest named = req;
  if (named.node_name().empty()) named.set_node_name(options_.node_name);
  // This client reads JoinResponse.bulk_port (below) when it has TLS, which the lane needs.
  if (options_.tls.identity && !transport::reads_bulk_lane(named))
    named.mutable_capabilities()->add_features(transport::kFeatureBulkLane);
  grpc::ClientContext ctx;
  prepare(ctx, options_.rpc_timeout);
  const grpc::Status s = stub_->Join(&ctx, named, resp);
  // Join is where a node learns whether the coordinator accepts it at all: a cut handshake is
  // probed for a certificate verdict here (rarely: Join is retried with backoff), not on every
  // call.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE)
    return transport::explain_connect_failure(s, options_.target, options_.tls,
                                              "coordinator at " + options_.target);
  ATOLL_RETURN_IF_ERROR(from_grpc(s, "Join", options_.rpc_timeout));
  // The streams' connection is opened now, while the node is admitted (a connection cap full of
  // strangers' idle connections would otherwise refuse it at the first pull); a failure here is
  // retried by the first stream.
  (void)transport::wait_until_connected(
      *stream_channel_,
      std::chrono::system_clock::now() +
          std::min<std::chrono::milliseconds>(options_.rpc_timeout, std::chrono::seconds(5)));
  // The bulk lane, on the host this node dials for gRPC (TLS only).
  std::shared_ptr<transport::BulkLaneClient> lane;
  std::string host, port;
  if (resp->bulk_port() != 0 && resp->bulk_port() <= 65535 && options_.tls.identity &&
      transport::tls_socket::split_target(options_.target, &host, &port)) {
    transport::BulkLaneClientOptions bo;
    bo.target = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                std::to_string(resp->bulk_port());
    bo.identity = options_.tls.identity;
    bo.server_name = options_.tls.server_name_override;
    bo.stall_timeout = options_.stall_timeout;  // its answer_timeout stays 300 s
    lane = std::make_shared<transport::BulkLaneClient>(std::move(bo));
  }
  std::lock_guard<std::mutex> lk(bulk_mu_);
  bulk_ = std::move(lane);
  return Status::Ok();
}

std::shared_ptr<transport::BulkLaneClient> GrpcCoordinatorCalls::bulk_lane() const {
  std::lock_guard<std::mutex> lk(bulk_mu_);
  return bulk_;
}

void GrpcCoordinatorCalls::drop_bulk_lane(const std::shared_ptr<transport::BulkLaneClient>& lane,
                                          const Status& why) {
  std::lock_guard<std::mutex> lk(bulk_mu_);
  if (bulk_ != lane) return;
  bulk_.reset();
  const std::string line = why.message() + "; pulls and pushes stay on gRPC";
  if (options_.log)
    options_.log(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

bool GrpcCoordinatorCalls::wait_for_link(std::chrono::milliseconds max_wait) {
  const auto deadline = std::chrono::system_clock::now() + max_wait;
  if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
    std::this_thread::sleep_until(deadline);  // connected: the failure was not the link
    return false;
  }
  return transport::wait_until_connected(*channel_, deadline);
}

Status GrpcCoordinatorCalls::heartbeat(const pb::HeartbeatRequest& req,
                                       pb::HeartbeatResponse* resp) {
  grpc::ClientContext ctx;
  prepare(ctx, options_.rpc_timeout);
  return from_grpc(stub_->Heartbeat(&ctx, req, resp), "Heartbeat", options_.rpc_timeout);
}

Status GrpcCoordinatorCalls::next_task(const pb::NextTaskRequest& req, pb::Task* task) {
  grpc::ClientContext ctx;
  const auto timeout = options_.rpc_timeout + std::chrono::milliseconds(req.wait_ms());
  prepare(ctx, timeout);
  return from_grpc(stub_->NextTask(&ctx, req, task), "NextTask", timeout);
}

Status GrpcCoordinatorCalls::pull_params(const pb::PullParamsRequest& req,
                                         pb::TensorHeader* header, std::string* payload) {
  if (auto lane = bulk_lane()) {
    const auto started = std::chrono::steady_clock::now();
    bool reached = false;
    Status st = lane->pull(req, options_.max_param_bytes, header, payload, &reached);
    if (st.ok()) {
      std::lock_guard<std::mutex> lk(transfer_mu_);
      transfers_.pull_bytes += payload->size();
      transfers_.pull_seconds += seconds_since(started);
    }
    if (reached) return st;
    drop_bulk_lane(lane, st);
  }
  grpc::ClientContext ctx;
  prepare(ctx, options_.stream_timeout);
  const auto started = std::chrono::steady_clock::now();
  auto reader = stream_stub_->PullParams(&ctx, req);
  transport::ChunkAssembler assembler(options_.max_param_bytes, std::move(*payload));
  pb::TensorChunk chunk;
  Status st;
  grpc::Status gs;
  {
    transport::StallWatchdog watchdog(ctx, options_.stall_timeout);
    while (reader->Read(&chunk)) {
      watchdog.progress();
      if (st.ok()) st = assembler.add(chunk);
      if (!st.ok()) {
        ctx.TryCancel();
        break;
      }
    }
    gs = reader->Finish();
    if (watchdog.fired()) return stalled("PullParams");
  }
  if (!st.ok())
    return Status(st.code(), "PullParams from " + options_.target + ": " + st.message());
  ATOLL_RETURN_IF_ERROR(from_grpc(gs, "PullParams", options_.stream_timeout));
  if (Status f = assembler.finish(); !f.ok())
    return Status(f.code(), "PullParams from " + options_.target + ": " + f.message());
  *header = assembler.header();
  *payload = assembler.take_payload();
  const double wire = seconds_since(started);
  std::lock_guard<std::mutex> lk(transfer_mu_);
  transfers_.pull_bytes += payload->size();
  transfers_.pull_seconds += wire;
  return Status::Ok();
}

Status GrpcCoordinatorCalls::push_update(const pb::TensorHeader& header,
                                         std::string_view payload,
                                         pb::PushUpdateResponse* resp) {
  if (auto lane = bulk_lane()) {
    const auto started = std::chrono::steady_clock::now();
    pb::TensorHeader h = header;
    h.set_wire_version(transport::kWireVersion);
    h.set_payload_bytes(payload.size());  // the lane hashes the payload as it sends it
    bool reached = false;
    double wire = 0;
    Status st = lane->push(h, payload, resp, &reached, &wire);
    if (st.ok()) {
      std::lock_guard<std::mutex> lk(transfer_mu_);
      transfers_.push_bytes += payload.size();
      transfers_.push_seconds += wire;
      transfers_.push_answer_seconds += seconds_since(started) - wire;
    }
    if (reached) return st;
    drop_bulk_lane(lane, st);
  }
  grpc::ClientContext ctx;
  prepare(ctx, options_.stream_timeout);
  const auto started = std::chrono::steady_clock::now();
  auto writer = stream_stub_->PushUpdate(&ctx, resp);
  // A failed Write means the server already answered (e.g. rejected the header): stop sending
  // and read its status from Finish().
  Status st;
  {
    transport::StallWatchdog watchdog(ctx, options_.stall_timeout);
    st = transport::for_each_chunk(
        header, payload,
        [&](const pb::TensorChunk& c) -> Status {
          if (!writer->Write(c)) return Unavailable("stream closed by the coordinator");
          watchdog.progress();
          return Status::Ok();
        },
        transport::kStreamChunkBytes);
    if (watchdog.fired()) {
      (void)writer->Finish();
      return stalled("PushUpdate");
    }
  }
  const double written = seconds_since(started);
  grpc::Status gs;
  {
    transport::StallWatchdog answer(ctx, options_.answer_timeout);
    writer->WritesDone();
    gs = writer->Finish();
    if (answer.fired())
      return Unavailable("coordinator at " + options_.target + ": no answer to PushUpdate " +
                         std::to_string(options_.answer_timeout.count() / 1000) +
                         " s after its last byte (the link stopped carrying answers; the update "
                         "may have arrived and counted); going on with the next round");
  }
  ATOLL_RETURN_IF_ERROR(from_grpc(gs, "PushUpdate", options_.stream_timeout));
  if (st.ok()) {
    const double call = seconds_since(started);
    const double wire = transport::push_upload_seconds(call, written, *resp);
    std::lock_guard<std::mutex> lk(transfer_mu_);
    transfers_.push_bytes += payload.size();
    transfers_.push_seconds += wire;
    transfers_.push_answer_seconds += call - wire;
  }
  return st;
}

TransferTotals GrpcCoordinatorCalls::transfer_totals() const {
  std::lock_guard<std::mutex> lk(transfer_mu_);
  return transfers_;
}

Status GrpcCoordinatorCalls::report_metrics(const pb::MetricsReport& req, pb::MetricsAck* ack) {
  grpc::ClientContext ctx;
  prepare(ctx, options_.rpc_timeout);
  return from_grpc(stub_->ReportMetrics(&ctx, req, ack), "ReportMetrics", options_.rpc_timeout);
}

Status GrpcCoordinatorCalls::leave(const pb::LeaveRequest& req, pb::LeaveResponse* resp) {
  grpc::ClientContext ctx;
  prepare(ctx, options_.rpc_timeout);
  return from_grpc(stub_->Leave(&ctx, req, resp), "Leave", options_.rpc_timeout);
}

Status GrpcCoordinatorCalls::report_importance(const pb::ImportanceReport& req,
                                               pb::ImportanceAck* resp) {
  grpc::ClientContext ctx;
  prepare(ctx, options_.rpc_timeout);
  return from_grpc(stub_->ReportImportance(&ctx, req, resp), "ReportImportance",
                   options_.rpc_timeout);
}

Status GrpcCoordinatorCalls::advertise_keys(const pb::SecAggKeys& req, pb::SecAggRoster* resp) {
  grpc::ClientContext ctx;
  const auto timeout = options_.rpc_timeout + std::chrono::milliseconds(req.wait_ms());
  prepare(ctx, timeout);
  return from_grpc(stub_->AdvertiseKeys(&ctx, req, resp), "AdvertiseKeys", timeout);
}

Status GrpcCoordinatorCalls::share_keys(const pb::SecAggShares& req, pb::SecAggShares* resp) {
  grpc::ClientContext ctx;
  const auto timeout = options_.rpc_timeout + std::chrono::milliseconds(req.wait_ms());
  prepare(ctx, timeout);
  return from_grpc(stub_->ShareKeys(&ctx, req, resp), "ShareKeys", timeout);
}

Status GrpcCoordinatorCalls::await_unmask(const pb::SecAggUnmaskPoll& req,
                                          pb::SecAggUnmaskTask* resp) {
  grpc::ClientContext ctx;
  const auto timeout = options_.rpc_timeout + std::chrono::milliseconds(req.wait_ms());
  prepare(ctx, timeout);
  return from_grpc(stub_->AwaitUnmask(&ctx, req, resp), "AwaitUnmask", timeout);
}

Status GrpcCoordinatorCalls::reveal_shares(const pb::SecAggReveal& req,
                                           pb::SecAggRevealAck* resp) {
  grpc::ClientContext ctx;
  // The reveal that completes the round returns once the round is committed.
  prepare(ctx, options_.stream_timeout);
  return from_grpc(stub_->RevealShares(&ctx, req, resp), "RevealShares", options_.stream_timeout);
}

}  // namespace atl::node
