// TLS-1.3-only gRPC server credentials.
//
// gRPC 1.51 (Debian 12) has no public API to set the TLS version range: the C++
// TlsCredentialsOptions gained set_min_tls_version/set_max_tls_version only in later releases,
// and the C core API has none. The SSL server credentials object does carry a version range
// (defaulting to TLS 1.2 .. 1.3) with exported setters, used here. This file is the only place
// that depends on that; when gRPC is upgraded, replace it with
// TlsServerCredentialsOptions::set_min_tls_version(grpc_tls_version::TLS1_3). The transport
// tests check that a TLS 1.2 client is refused, so a regression cannot pass silently.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "kernels/core/status.h"

namespace atl::transport {

// PEM inputs. Clients must present a certificate that chains to `client_ca_pem`.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls13_mtls_server_credentials(
    const std::string& client_ca_pem, const std::string& key_pem, const std::string& cert_pem);

}  // namespace atl::transport
