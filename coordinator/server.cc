#include "coordinator/server.h"

#include <grpcpp/server_builder.h>

#include "transport/channel.h"

namespace atl::coordinator {

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start(CoordinatorService& service,
                                                                      ServerOptions options) {
  auto started = start_with(
      service, [&service] { service.shutdown(); },
      [&service] {  // not owned: the caller keeps the service alive
        return std::shared_ptr<CoordinatorService>(std::shared_ptr<CoordinatorService>(),
                                                   &service);
      },
      std::move(options));
  if (started.ok()) service.set_bulk_port(static_cast<uint32_t>((*started)->bulk_port()));
  return started;
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start(ServiceRouter& router,
                                                                      ServerOptions options) {
  auto started = start_with(
      router, [&router] { router.shutdown(); }, [&router] { return router.current(); },
      std::move(options));
  if (started.ok()) router.set_bulk_port(static_cast<uint32_t>((*started)->bulk_port()));
  return started;
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::start_with(
    grpc::Service& service, std::function<void()> wake,
    std::function<std::shared_ptr<CoordinatorService>()> current, ServerOptions options) {
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
  if (options.refusal_log) s->listener_->set_refusal_log(options.refusal_log);
  builder.RegisterService(&service);
  transport::apply_server_limits(builder, options.limits);
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return Unavailable("cannot serve gRPC on " + options.listen);
  s->listener_->start();
  if (!options.bulk_listen.empty()) {
    if (options.bulk_tls.cert_pem.empty())
      return InvalidArgument("--bulk-listen needs mTLS (it is not offered with --insecure)");
    s->bulk_handler_ = std::make_unique<CoordinatorBulkHandler>(std::move(current));
    transport::BulkLaneOptions bo;
    bo.listen = options.bulk_listen;
    bo.tls = options.bulk_tls;
    bo.handshake_timeout = options.limits.handshake_timeout;
    bo.caps = options.limits.caps;
    bo.caps.evict_idle = false;
    bo.refusal_log = options.refusal_log;
    ATOLL_ASSIGN_OR_RETURN(s->bulk_, transport::BulkLaneServer::start(bo, *s->bulk_handler_));
  }
  s->address_ = options.listen.substr(0, colon) + ":" + std::to_string(s->port_);
  return s;
}

void CoordinatorServer::shutdown() {
  if (!server_) return;
  listener_->stop();  // no new connections
  if (bulk_) bulk_->stop();  // transfers in flight are cut (their pushes aborted)
  wake_();  // long-polls return now instead of at their wait_ms
  server_->Shutdown(std::chrono::system_clock::now() + grace_);
  server_->Wait();
  server_.reset();
}

CoordinatorServer::~CoordinatorServer() {
  shutdown();
}

}  // namespace atl::coordinator
