#include "coordinator/router.h"

#include <utility>

#include "transport/bulk_lane.h"

namespace atl::coordinator {

namespace pb = atoll_pb::v1;

std::shared_ptr<CoordinatorService> ServiceRouter::set(std::shared_ptr<CoordinatorService> service) {
  std::shared_ptr<CoordinatorService> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old = std::exchange(current_, std::move(service));
  }
  if (old) old->shutdown();
  return old;
}

std::shared_ptr<CoordinatorService> ServiceRouter::current() const {
  std::lock_guard<std::mutex> lk(mu_);
  return current_;
}

void ServiceRouter::shutdown() {
  if (auto s = current()) s->shutdown();
}

grpc::Status ServiceRouter::route(const std::string& experiment_id,
                                  std::shared_ptr<CoordinatorService>* out) const {
  *out = current();
  if (!*out)
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this coordinator serves no experiment now; retry later");
  if (!experiment_id.empty() && experiment_id != (*out)->experiment_id())
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "experiment '" + experiment_id.substr(0, 80) +
                            "' is not served now; this coordinator serves '" +
                            (*out)->experiment_id() + "' (join again to take part in it)");
  return grpc::Status::OK;
}

grpc::Status ServiceRouter::Join(grpc::ServerContext* ctx, const pb::JoinRequest* req,
                                 pb::JoinResponse* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route("", &s); !st.ok()) return st;
  grpc::Status st = s->Join(ctx, req, resp);
  if (st.ok()) resp->set_bulk_port(transport::reads_bulk_lane(*req) ? bulk_port_.load() : 0);
  return st;
}

grpc::Status ServiceRouter::Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->Heartbeat(ctx, req, resp);
}

grpc::Status ServiceRouter::NextTask(grpc::ServerContext* ctx, const pb::NextTaskRequest* req,
                                     pb::Task* task) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->NextTask(ctx, req, task);
}

grpc::Status ServiceRouter::PullParams(grpc::ServerContext* ctx, const pb::PullParamsRequest* req,
                                       grpc::ServerWriter<pb::TensorChunk>* writer) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->PullParams(ctx, req, writer);
}

grpc::Status ServiceRouter::PushUpdate(grpc::ServerContext* ctx,
                                       grpc::ServerReader<pb::TensorChunk>* reader,
                                       pb::PushUpdateResponse* resp) {
  // The experiment id is in the first chunk's header; the service checks it.
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route("", &s); !st.ok()) return st;
  return s->PushUpdate(ctx, reader, resp);
}

grpc::Status ServiceRouter::ReportMetrics(grpc::ServerContext* ctx, const pb::MetricsReport* req,
                                          pb::MetricsAck* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->ReportMetrics(ctx, req, resp);
}

grpc::Status ServiceRouter::Leave(grpc::ServerContext* ctx, const pb::LeaveRequest* req,
                                  pb::LeaveResponse* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->Leave(ctx, req, resp);
}

grpc::Status ServiceRouter::ReportImportance(grpc::ServerContext* ctx,
                                             const pb::ImportanceReport* req,
                                             pb::ImportanceAck* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->ReportImportance(ctx, req, resp);
}

grpc::Status ServiceRouter::AdvertiseKeys(grpc::ServerContext* ctx, const pb::SecAggKeys* req,
                                   pb::SecAggRoster* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->AdvertiseKeys(ctx, req, resp);
}

grpc::Status ServiceRouter::ShareKeys(grpc::ServerContext* ctx, const pb::SecAggShares* req,
                                   pb::SecAggShares* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->ShareKeys(ctx, req, resp);
}

grpc::Status ServiceRouter::AwaitUnmask(grpc::ServerContext* ctx, const pb::SecAggUnmaskPoll* req,
                                   pb::SecAggUnmaskTask* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->AwaitUnmask(ctx, req, resp);
}

grpc::Status ServiceRouter::RevealShares(grpc::ServerContext* ctx, const pb::SecAggReveal* req,
                                   pb::SecAggRevealAck* resp) {
  std::shared_ptr<CoordinatorService> s;
  if (grpc::Status st = route(req->experiment_id(), &s); !st.ok()) return st;
  return s->RevealShares(ctx, req, resp);
}

}  // namespace atl::coordinator
