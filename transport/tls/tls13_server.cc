#include "transport/tls/tls13_server.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/grpc_security_constants.h>

// gRPC core's SSL server credentials class (src/core/lib/security/credentials/ssl/
// ssl_credentials.h, not installed). Only its two exported, non-virtual version setters are
// declared, so calls bind to libgrpc's symbols
// grpc_ssl_server_credentials::set_{min,max}_tls_version(grpc_tls_version).
class grpc_ssl_server_credentials {
 public:
  void set_min_tls_version(grpc_tls_version min_tls_version);
  void set_max_tls_version(grpc_tls_version max_tls_version);
};

namespace atl::transport {
namespace {

// Owns one core grpc_server_credentials and binds listening ports with it, as gRPC's own
// SecureServerCredentials does.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  // The base class has initialized the gRPC library by the time the body runs.
  CoreServerCredentials(const std::string& client_ca_pem, const std::string& key_pem,
                        const std::string& cert_pem) {
    grpc_ssl_pem_key_cert_pair pair{key_pem.c_str(), cert_pem.c_str()};
    creds_ = grpc_ssl_server_credentials_create_ex(
        client_ca_pem.c_str(), &pair, 1, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
  }
  ~CoreServerCredentials() override {
    if (creds_ != nullptr) grpc_server_credentials_release(creds_);
  }
  grpc_server_credentials* get() const { return creds_; }
  CoreServerCredentials(const CoreServerCredentials&) = delete;
  CoreServerCredentials& operator=(const CoreServerCredentials&) = delete;

  // Atoll authorizes in the service from the verified certificate (peer_identity), not with
  // metadata processors.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* creds_ = nullptr;
};

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls13_mtls_server_credentials(
    const std::string& client_ca_pem, const std::string& key_pem, const std::string& cert_pem) {
  auto owned = std::make_shared<CoreServerCredentials>(client_ca_pem, key_pem, cert_pem);
  if (owned->get() == nullptr) return Internal("gRPC refused the server key/certificate");
  // grpc_ssl_server_credentials derives singly from grpc_server_credentials: same address.
  auto* ssl = reinterpret_cast<grpc_ssl_server_credentials*>(owned->get());
  ssl->set_min_tls_version(TLS1_3);
  ssl->set_max_tls_version(TLS1_3);
  return std::shared_ptr<grpc::ServerCredentials>(std::move(owned));
}

}  // namespace atl::transport
