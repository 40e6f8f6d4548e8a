// A CoordinatorCalls that hands every call to another one: the base of a link that changes some
// calls on their way (simulate/byzantine.h's attacked pushes) and passes the rest on unchanged.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "node/coordinator_calls.h"

namespace atl::node {

class ForwardingCalls : public CoordinatorCalls {
 public:
  explicit ForwardingCalls(std::unique_ptr<CoordinatorCalls> inner) : inner_(std::move(inner)) {}

  const std::string& target() const override { return inner_->target(); }
  const transport::ClientIdentity* identity() const override { return inner_->identity(); }
  Status join(const atoll_pb::v1::JoinRequest& req, atoll_pb::v1::JoinResponse* resp) override {
    return inner_->join(req, resp);
  }
  Status heartbeat(const atoll_pb::v1::HeartbeatRequest& req,
                   atoll_pb::v1::HeartbeatResponse* resp) override {
    return inner_->heartbeat(req, resp);
  }
  Status next_task(const atoll_pb::v1::NextTaskRequest& req, atoll_pb::v1::Task* task) override {
    return inner_->next_task(req, task);
  }
  Status pull_params(const atoll_pb::v1::PullParamsRequest& req,
                     atoll_pb::v1::TensorHeader* header, std::string* payload) override {
    return inner_->pull_params(req, header, payload);
  }
  Status push_update(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                     atoll_pb::v1::PushUpdateResponse* resp) override {
    return inner_->push_update(header, payload, resp);
  }
  Status report_metrics(const atoll_pb::v1::MetricsReport& req,
                        atoll_pb::v1::MetricsAck* ack) override {
    return inner_->report_metrics(req, ack);
  }
  Status leave(const atoll_pb::v1::LeaveRequest& req, atoll_pb::v1::LeaveResponse* resp) override {
    return inner_->leave(req, resp);
  }
  Status report_importance(const atoll_pb::v1::ImportanceReport& req,
                           atoll_pb::v1::ImportanceAck* resp) override {
    return inner_->report_importance(req, resp);
  }
  Status advertise_keys(const atoll_pb::v1::SecAggKeys& req,
                        atoll_pb::v1::SecAggRoster* resp) override {
    return inner_->advertise_keys(req, resp);
  }
  Status share_keys(const atoll_pb::v1::SecAggShares& req,
                    atoll_pb::v1::SecAggShares* resp) override {
    return inner_->share_keys(req, resp);
  }
  Status await_unmask(const atoll_pb::v1::SecAggUnmaskPoll& req,
                      atoll_pb::v1::SecAggUnmaskTask* resp) override {
    return inner_->await_unmask(req, resp);
  }
  Status reveal_shares(const atoll_pb::v1::SecAggReveal& req,
                       atoll_pb::v1::SecAggRevealAck* resp) override {
    return inner_->reveal_shares(req, resp);
  }
  bool wait_for_link(std::chrono::milliseconds max_wait) override {
    return inner_->wait_for_link(max_wait);
  }
  TransferTotals transfer_totals() const override { return inner_->transfer_totals(); }
  void drop_connections() override { inner_->drop_connections(); }

 protected:
  CoordinatorCalls& inner() { return *inner_; }

 private:
  std::unique_ptr<CoordinatorCalls> inner_;
};

}  // namespace atl::node
