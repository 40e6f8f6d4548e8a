// The coordinator's side of the bulk lane (transport/bulk_lane.h): each transfer goes to the
// CoordinatorService current when it arrives (the router's, or a single service's), through the
// same steps as its gRPC PullParams / PushUpdate (CoordinatorService::plan_pull, begin_push, ...).
#pragma once

#include <functional>
#include <memory>

#include "coordinator/service.h"
#include "transport/bulk_lane.h"

namespace atl::coordinator {

class CoordinatorBulkHandler final : public transport::BulkHandler {
 public:
  // `current`: the service serving now (null: none; transfers get UNAVAILABLE).
  explicit CoordinatorBulkHandler(std::function<std::shared_ptr<CoordinatorService>()> current)
      : current_(std::move(current)) {}

  StatusOr<Pull> pull(const transport::PeerIdentity& peer,
                      const atoll_pb::v1::PullParamsRequest& request) override;
  void pull_sent(const transport::PeerIdentity& peer, const Pull& pull) override;
  Status still_admitted(const transport::PeerIdentity& peer) override;
  StatusOr<PushAdmission> begin_push(const transport::PeerIdentity& peer,
                                     const atoll_pb::v1::TensorHeader& header) override;
  void abort_push(const std::shared_ptr<void>& session, const atoll_pb::v1::TensorHeader& header,
                  const Status& why) override;
  StatusOr<atoll_pb::v1::PushUpdateResponse> finish_push(
      const std::shared_ptr<void>& session, const atoll_pb::v1::TensorHeader& header,
      std::string payload, std::chrono::steady_clock::time_point began) override;

 private:
  // The service for a transfer naming `experiment_id`, and the caller's node id in it.
  StatusOr<std::shared_ptr<CoordinatorService>> service_for(const transport::PeerIdentity& peer,
                                                            const std::string& experiment_id,
                                                            std::string* node) const;

  std::function<std::shared_ptr<CoordinatorService>()> current_;
};

}  // namespace atl::coordinator
