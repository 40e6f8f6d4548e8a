// A gRPC server hosting a CoordinatorService (or a ServiceRouter that forwards to the current
// one) on HOST:PORT (port 0 → an ephemeral port, reported
// by port()). Message sizes are bounded (transport::apply_server_limits). RAII: destruction
// wakes the service's long-polls and shuts the server down.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "coordinator/router.h"
#include "coordinator/service.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT
  // transport::server_credentials(dir, name) for mTLS; insecure_server_credentials() only for
  // --insecure.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // How long shutdown waits for in-flight calls before cancelling them.
  std::chrono::milliseconds shutdown_grace{2000};
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
  // Idempotent.
  void shutdown();

 private:
  CoordinatorServer(std::function<void()> wake, std::chrono::milliseconds grace)
      : wake_(std::move(wake)), grace_(grace) {}
  static StatusOr<std::unique_ptr<CoordinatorServer>> start_with(grpc::Service& service,
                                                                 std::function<void()> wake,
                                                                 ServerOptions options);
  std::function<void()> wake_;  // wakes long-polls before shutdown
  std::chrono::milliseconds grace_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
};

}  // namespace atl::coordinator
