#include "coordinator/server.h"

#include <grpcpp/server_builder.h>

#include "transport/channel.h"

namespace atl::coordinator {

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start(CoordinatorService& service,
                                                                      ServerOptions options) {
  return start_with(service, [&service] { service.shutdown(); }, std::move(options));
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start(ServiceRouter& router,
                                                                      ServerOptions options) {
  return start_with(router, [&router] { router.shutdown(); }, std::move(options));
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start_with(
    grpc::Service& service, std::function<void()> wake, ServerOptions options) {
  if (!options.credentials)
    return InvalidArgument("coordinator server: no credentials (use TLS, or --insecure)");
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == options.listen.size())
    return InvalidArgument("--listen " + options.listen + " must be HOST:PORT, e.g. 0.0.0.0:7070");
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer(std::move(wake), options.shutdown_grace));
  if (options.limits.handshake_timeout.count() < 1)
    return InvalidArgument("coordinator server: the handshake timeout must be positive");
  // The port is bound by our listener (it owns it alone: no SO_REUSEPORT), which hands each
  // connection under the caps to gRPC.
  ATOLL_ASSIGN_OR_RETURN(s->listener_, transport::CappedListener::bind(
                                           options.listen, options.limits.caps, "--listen"));
  s->port_ = s->listener_->port();
  grpc::ServerBuilder builder;
  s->listener_->attach(builder, options.credentials);
  builder.RegisterService(&service);
  transport::apply_server_limits(builder, options.limits);
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return Unavailable("cannot serve gRPC on " + options.listen);
  s->listener_->start();
  s->address_ = options.listen.substr(0, colon) + ":" + std::to_string(s->port_);
  return s;
}

void CoordinatorServer::shutdown() {
  if (!server_) return;
  listener_->stop();  // no new connections
  wake_();  // long-polls return now instead of at their wait_ms
  server_->Shutdown(std::chrono::system_clock::now() + grace_);
  server_->Wait();
  server_.reset();
}

CoordinatorServer::~CoordinatorServer() {
  shutdown();
}

}  // namespace atl::coordinator
