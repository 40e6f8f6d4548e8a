#include "simulate/in_process_calls.h"

#include <chrono>

#include "transport/tensor_stream.h"

namespace atl::simulate {
namespace pb = atoll_pb::v1;

InProcessCalls::InProcessCalls(coordinator::RoundEngine& engine, std::string site_name,
                               coordinator::CoordinatorMetrics* metrics)
    : engine_(engine), site_(std::move(site_name)), metrics_(metrics) {}

Status InProcessCalls::join(const pb::JoinRequest& req, pb::JoinResponse* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.join(site_, req));
  return Status::Ok();
}

Status InProcessCalls::heartbeat(const pb::HeartbeatRequest& req, pb::HeartbeatResponse* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.heartbeat(site_, req));
  return Status::Ok();
}

Status InProcessCalls::next_task(const pb::NextTaskRequest& req, pb::Task* task) {
  ATOLL_ASSIGN_OR_RETURN(*task, engine_.next_task(site_, req));
  return Status::Ok();
}

Status InProcessCalls::pull_params(const pb::PullParamsRequest& req, pb::TensorHeader* header,
                                   std::string* payload) {
  // A copy in memory: no digest to check, so none is computed.
  ATOLL_ASSIGN_OR_RETURN(coordinator::PullPlan plan,
                         engine_.pull(site_, req, coordinator::PullDigest::kIfKnown));
  *header = plan.header;
  payload->assign(plan.payload.data(), plan.payload.size());
  engine_.pull_delivered(site_, header->round(), payload->size());
  if (metrics_) metrics_->add_bytes_down(payload->size());
  return Status::Ok();
}

Status InProcessCalls::push_update(const pb::TensorHeader& header, std::string_view payload,
                                   pb::PushUpdateResponse* resp) {
  // What the chunked stream would carry in its first chunk's header.
  pb::TensorHeader h = header;
  h.set_wire_version(transport::kWireVersion);
  h.set_payload_bytes(payload.size());
  const auto began = std::chrono::steady_clock::now();
  ATOLL_RETURN_IF_ERROR(engine_.begin_update(site_, h));
  if (metrics_) metrics_->add_bytes_up(payload.size());
  // The round engine reads a whole received payload, as the chunked stream's receiver holds one.
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.finish_update(site_, h, std::string(payload)));
  if (metrics_)
    metrics_->observe_push(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return Status::Ok();
}

Status InProcessCalls::report_metrics(const pb::MetricsReport& req, pb::MetricsAck*) {
  return engine_.report_metrics(site_, req);
}

Status InProcessCalls::leave(const pb::LeaveRequest& req, pb::LeaveResponse*) {
  return engine_.leave(site_, req);
}

Status InProcessCalls::report_importance(const pb::ImportanceReport& req,
                                         pb::ImportanceAck* resp) {
  ATOLL_RETURN_IF_ERROR(engine_.report_importance(site_, req));
  resp->set_accepted(true);
  return Status::Ok();
}

Status InProcessCalls::advertise_keys(const pb::SecAggKeys& req, pb::SecAggRoster* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.advertise_keys(site_, req));
  return Status::Ok();
}

Status InProcessCalls::share_keys(const pb::SecAggShares& req, pb::SecAggShares* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.share_keys(site_, req));
  return Status::Ok();
}

Status InProcessCalls::await_unmask(const pb::SecAggUnmaskPoll& req, pb::SecAggUnmaskTask* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.await_unmask(site_, req));
  return Status::Ok();
}

Status InProcessCalls::reveal_shares(const pb::SecAggReveal& req, pb::SecAggRevealAck* resp) {
  ATOLL_ASSIGN_OR_RETURN(*resp, engine_.reveal_shares(site_, req));
  return Status::Ok();
}

}  // namespace atl::simulate
