#include "coordinator/bulk_handler.h"

namespace atl::coordinator {

namespace pb = atoll_pb::v1;

StatusOr<std::shared_ptr<CoordinatorService>> CoordinatorBulkHandler::service_for(
    const transport::PeerIdentity& peer, const std::string& experiment_id,
    std::string* node) const {
  std::shared_ptr<CoordinatorService> s = current_();
  if (!s) return Unavailable("this coordinator serves no experiment now; retry later");
  if (experiment_id != s->experiment_id())
    return FailedPrecondition("experiment '" + experiment_id.substr(0, 80) +
                              "' is not served now; this coordinator serves '" +
                              s->experiment_id() + "' (join again to take part in it)");
  ATOLL_ASSIGN_OR_RETURN(*node, s->bulk_node(peer, experiment_id));
  return s;
}

namespace {

// A transfer's service (held for the transfer's duration, even if another one becomes current
// meanwhile), the caller's node id in it and, for a pull, its plan (which owns the payload).
struct Transfer {
  std::shared_ptr<CoordinatorService> service;
  std::string node;
  PullPlan plan;
};

}  // namespace

StatusOr<transport::BulkHandler::Pull> CoordinatorBulkHandler::pull(
    const transport::PeerIdentity& peer, const pb::PullParamsRequest& request) {
  auto t = std::make_shared<Transfer>();
  ATOLL_ASSIGN_OR_RETURN(t->service, service_for(peer, request.experiment_id(), &t->node));
  // The lane sends the digest after the payload: a θ not hashed yet is hashed on its way.
  ATOLL_ASSIGN_OR_RETURN(t->plan, t->service->plan_pull(t->node, request, PullDigest::kIfKnown));
  Pull out;
  out.header = t->plan.header;
  out.payload = t->plan.payload;
  out.keep_alive = std::move(t);
  return out;
}

Status CoordinatorBulkHandler::still_admitted(const transport::PeerIdentity& peer) {
  std::shared_ptr<CoordinatorService> s = current_();
  return s ? s->certificate_admitted(peer) : Status::Ok();
}

void CoordinatorBulkHandler::pull_sent(const transport::PeerIdentity&, const Pull& pull) {
  const auto* t = static_cast<const Transfer*>(pull.keep_alive.get());
  t->service->pull_sent(t->node, t->plan);
}

StatusOr<transport::BulkHandler::PushAdmission> CoordinatorBulkHandler::begin_push(
    const transport::PeerIdentity& peer, const pb::TensorHeader& header) {
  auto t = std::make_shared<Transfer>();
  ATOLL_ASSIGN_OR_RETURN(t->service, service_for(peer, header.experiment_id(), &t->node));
  ATOLL_ASSIGN_OR_RETURN(std::string buffer, t->service->begin_push(t->node, header));
  const uint64_t max_bytes = t->service->max_push_bytes(header);
  return PushAdmission{max_bytes, std::move(buffer), std::move(t)};
}

void CoordinatorBulkHandler::abort_push(const std::shared_ptr<void>& session,
                                        const pb::TensorHeader& header, const Status& why) {
  const auto* t = static_cast<const Transfer*>(session.get());
  t->service->abort_push(t->node, header, why);
}

StatusOr<pb::PushUpdateResponse> CoordinatorBulkHandler::finish_push(
    const std::shared_ptr<void>& session, const pb::TensorHeader& header, std::string payload,
    std::chrono::steady_clock::time_point began) {
  const auto* t = static_cast<const Transfer*>(session.get());
  return t->service->finish_push(t->node, header, std::move(payload), began);
}

}  // namespace atl::coordinator
