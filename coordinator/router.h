// The gRPC face of a coordinator that can switch experiments: implements the Coordinator
// service by forwarding every call to the CURRENT CoordinatorService.
//
// The dashboard starts a stored experiment by opening a service for it and making it current
// (ExperimentManager::start); nodes keep the same address. A call names its experiment
// (every request but Join and the streaming PushUpdate carries experiment_id): a call for an
// experiment that is not current is answered FAILED_PRECONDITION naming the current one, so a
// node of a finished experiment learns why instead of being routed into another one.
//
// Threads: the current service is a shared_ptr guarded by a mutex held only to copy it; a call
// holds its own copy for its whole duration, so set() never waits for a long-poll and a replaced
// service is destroyed when its last call returns (set() wakes its long-polls first).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "coordinator/service.h"

namespace atl::coordinator {

class ServiceRouter final : public atoll_pb::v1::Coordinator::Service {
 public:
  ServiceRouter() = default;
  explicit ServiceRouter(std::shared_ptr<CoordinatorService> service) : current_(std::move(service)) {}
  ServiceRouter(const ServiceRouter&) = delete;
  ServiceRouter& operator=(const ServiceRouter&) = delete;

  // Makes `service` current (nullptr: calls get UNAVAILABLE) and returns the previous one after
  // waking its long-polls (CoordinatorService::shutdown): it refuses calls from now on.
  std::shared_ptr<CoordinatorService> set(std::shared_ptr<CoordinatorService> service);
  std::shared_ptr<CoordinatorService> current() const;
  // Wakes the current service's long-polls (before grpc::Server::Shutdown).
  void shutdown();
  // The bulk lane's port, told to nodes in every JoinResponse (0 = none).
  void set_bulk_port(uint32_t port) { bulk_port_.store(port); }

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
  grpc::Status ReportImportance(grpc::ServerContext* ctx,
                                const atoll_pb::v1::ImportanceReport* req,
                                atoll_pb::v1::ImportanceAck* resp) override;
  grpc::Status AdvertiseKeys(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggKeys* req,
                             atoll_pb::v1::SecAggRoster* resp) override;
  grpc::Status ShareKeys(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggShares* req,
                         atoll_pb::v1::SecAggShares* resp) override;
  grpc::Status AwaitUnmask(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggUnmaskPoll* req,
                           atoll_pb::v1::SecAggUnmaskTask* resp) override;
  grpc::Status RevealShares(grpc::ServerContext* ctx, const atoll_pb::v1::SecAggReveal* req,
                            atoll_pb::v1::SecAggRevealAck* resp) override;

 private:
  // The current service for a call naming `experiment_id` ("" = any), or the status to answer.
  grpc::Status route(const std::string& experiment_id,
                     std::shared_ptr<CoordinatorService>* out) const;

  mutable std::mutex mu_;
  std::shared_ptr<CoordinatorService> current_;
  std::atomic<uint32_t> bulk_port_{0};
};

}  // namespace atl::coordinator
