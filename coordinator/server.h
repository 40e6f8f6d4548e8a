// A gRPC server hosting a CoordinatorService (or a ServiceRouter that forwards to the current
// one) on HOST:PORT (port 0 → an ephemeral port, reported
// by port()). Message sizes and connections are bounded (ServerOptions::limits): the server
// accepts on its own listener (transport::CappedListener) so that open connections are capped
// in all and per address, and gRPC closes a connection whose TLS handshake is not done within
// limits.handshake_timeout. RAII: destruction wakes the service's long-polls and shuts the
// server down.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "coordinator/bulk_handler.h"
#include "coordinator/router.h"
#include "coordinator/service.h"
#include "kernels/core/status.h"
#include "transport/bulk_lane.h"
#include "transport/capped_listener.h"
#include "transport/channel.h"

namespace atl::coordinator {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT
  // transport::server_credentials(dir, name) for mTLS; insecure_server_credentials() only for
  // --insecure.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // How long shutdown waits for in-flight calls before cancelling them.
  std::chrono::milliseconds shutdown_grace{2000};
  // Handshake timeout, connection caps, idle timeout, streams and threads
  // (`atoll coordinator --max-connections ...`, docs/coordinator.md "Connection limits").
  transport::ServerLimits limits;
  // The bulk lane (transport/bulk_lane.h) for pulls and pushes: HOST:PORT ("" = none). It needs
  // mTLS: bulk_tls is the same certificate, key and CA as `credentials`. It takes the handshake
  // timeout and connection caps of `limits`.
  std::string bulk_listen;
  transport::TlsIdentity bulk_tls;
  // Lines about connections closed at a cap of `limits` (at most one per 10 s a port); empty =
  // none.
  std::function<void(const std::string&)> refusal_log;
};

class CoordinatorServer {
 public:
  // `service` must outlive the server.
  static StatusOr<std::unique_ptr<CoordinatorServer>> start(CoordinatorService& service,
                                                            ServerOptions options);
  // `router` must outlive the server.
  static StatusOr<std::unique_ptr<CoordinatorServer>> start(ServiceRouter& router,
                                                            ServerOptions options);
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return port_; }
  // "HOST:PORT" with the bound port, e.g. "127.0.0.1:41234".
  const std::string& address() const { return address_; }
  // Connections gRPC holds open now (refreshed on each call), and connections closed at once
  // because a cap was reached since the start.
  size_t open_connections() const { return listener_->open_connections(); }
  uint64_t refused_connections() const { return listener_->refused_connections(); }
  // The bulk lane's port; 0 = none.
  int bulk_port() const { return bulk_ ? bulk_->port() : 0; }
  // The bulk lane's server (null: none), for its counters.
  const transport::BulkLaneServer* bulk_lane() const { return bulk_.get(); }
  // Idempotent.
  void shutdown();

 private:
  CoordinatorServer(std::function<void()> wake, std::chrono::milliseconds grace)
      : wake_(std::move(wake)), grace_(grace) {}
  static StatusOr<std::unique_ptr<CoordinatorServer>> start_with(
      grpc::Service& service, std::function<void()> wake,
      std::function<std::shared_ptr<CoordinatorService>()> current, ServerOptions options);
  std::function<void()> wake_;  // wakes long-polls before shutdown
  std::chrono::milliseconds grace_;
  std::unique_ptr<transport::CappedListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CoordinatorBulkHandler> bulk_handler_;
  std::unique_ptr<transport::BulkLaneServer> bulk_;
  int port_ = 0;
  std::string address_;
};

}  // namespace atl::coordinator
