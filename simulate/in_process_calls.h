// A virtual site's calls to a RoundEngine in the same process (`atoll simulate`): the requests
// and answers are the protobuf messages a real node exchanges with `atoll coordinator` over mTLS
// gRPC, handed over in memory. The caller's identity is the site's name, as a node's is the name
// in its certificate. Thread-safe as the engine is: each site thread owns one InProcessCalls.
#pragma once

#include <string>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/round_engine.h"
#include "node/coordinator_calls.h"

namespace atl::simulate {

class InProcessCalls final : public node::CoordinatorCalls {
 public:
  // `engine` (and `metrics`, when given) must outlive this object. With `metrics`, the payloads
  // count in atoll_bytes_total and the accepted pushes in atoll_push_duration_seconds, as the
  // gRPC service counts those of node processes.
  InProcessCalls(coordinator::RoundEngine& engine, std::string site_name,
                 coordinator::CoordinatorMetrics* metrics = nullptr);

  const std::string& target() const override { return target_; }
  Status join(const atoll_pb::v1::JoinRequest& req, atoll_pb::v1::JoinResponse* resp) override;
  Status heartbeat(const atoll_pb::v1::HeartbeatRequest& req,
                   atoll_pb::v1::HeartbeatResponse* resp) override;
  Status next_task(const atoll_pb::v1::NextTaskRequest& req, atoll_pb::v1::Task* task) override;
  Status pull_params(const atoll_pb::v1::PullParamsRequest& req,
                     atoll_pb::v1::TensorHeader* header, std::string* payload) override;
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

 private:
  coordinator::RoundEngine& engine_;
  const std::string site_;
  coordinator::CoordinatorMetrics* const metrics_;  // null: not counted
  const std::string target_ = "in-process coordinator";
};

}  // namespace atl::simulate
