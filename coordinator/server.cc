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
  ATOLL_RETURN_IF_ERROR(transport::check_can_listen(options.listen, "--listen"));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, options.credentials, &s->port_);
  builder.RegisterService(&service);
  transport::apply_server_limits(builder);
  transport::apply_exclusive_port(builder);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    // Bound by another process between the check above and gRPC's bind, or refused otherwise.
    Status why = transport::check_can_listen(options.listen, "--listen");
    return why.ok()
               ? Unavailable("cannot listen on " + options.listen + " (gRPC refused the address)")
               : why;
  }
  s->address_ = options.listen.substr(0, colon) + ":" + std::to_string(s->port_);
  return s;
}

void CoordinatorServer::shutdown() {
  if (!server_) return;
  wake_();  // long-polls return now instead of at their wait_ms
  server_->Shutdown(std::chrono::system_clock::now() + grace_);
  server_->Wait();
  server_.reset();
}

CoordinatorServer::~CoordinatorServer() {
  shutdown();
}

}  // namespace atl::coordinator
