// gRPC credentials from a TLS directory (see ca.h for its layout).
//
// Every file is loaded and checked before gRPC sees it (present, parseable, key matches
// certificate, inside its validity window, signed by the directory's CA, usable for its TLS
// side), so a bad certificate is one clear Status at startup rather than an opaque handshake
// failure later.
//
// The server speaks TLS 1.3 only and requires a client certificate signed by the CA
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY); see tls13_server.h.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>

#include "kernels/core/status.h"
#include "transport/tls/ca.h"

namespace atl::transport {

// Checks dir/<name>.crt + dir/<name>.key against dir/ca.crt for use as `role`
// (kServer: TLS server; kNode/kAdmin: TLS client). Messages name the fix.
Status validate_identity(const std::string& dir, const std::string& name, Role role);

// TLS 1.3, mutual TLS. Uses dir/<server_name>.{crt,key}, trusts dir/ca.crt for clients.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials(
    const std::string& dir, const std::string& server_name);

// The PEM texts behind one side's credentials, for TLS of our own beside gRPC: a client's
// handshake probe (tls/handshake_probe.h) when gRPC's account of a failed one is ambiguous, and
// both ends of the bulk lane (transport/bulk_lane.h).
struct TlsIdentity {
  std::string ca_pem;    // the only CA trusted for the peer
  std::string cert_pem;  // this side's certificate
  std::string key_pem;   // and its private key
};
using ClientIdentity = TlsIdentity;

// dir/<server_name>.{crt,key} and dir/ca.crt, checked as server_credentials checks them.
StatusOr<TlsIdentity> server_identity(const std::string& dir, const std::string& server_name);

// What a client needs to open a channel: credentials plus the name the server certificate must
// carry (when it differs from the host in the target, e.g. dialing 127.0.0.1:PORT).
struct ClientTls {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string server_name_override;  // "" = verify against the target's host
  // The command-line flag that sets server_name_override, named when the server's certificate
  // does not hold that name (transport::explain_call_error): a node's coordinator name is
  // --server-name, the teachers' name of a DiLoCo node --teacher-name.
  std::string name_flag = "--server-name";
  bool insecure = false;
  std::shared_ptr<const ClientIdentity> identity;  // null in --insecure mode
};

// Presents dir/<node_name>.{crt,key}; trusts only dir/ca.crt for the server.
StatusOr<ClientTls> client_credentials(const std::string& dir, const std::string& node_name,
                                       const std::string& server_name_override = "");

// Plaintext, for the explicit `--insecure` mode only.
std::shared_ptr<grpc::ServerCredentials> insecure_server_credentials();
ClientTls insecure_client_credentials();

// The caller as authenticated by mTLS.
struct PeerIdentity {
  std::string name;         // certificate CN
  std::string role;         // certificate OU: "node" / "admin" ("" if absent)
  std::string fingerprint;  // SHA-256 of the certificate (DER), hex
  std::string serial_hex;   // the certificate's serial, upper-case hex (RevocationWatch::check)
  std::string certificate_pem;  // the certificate as presented in the handshake
};

// Unauthenticated when the call did not come over mTLS with a verified client certificate
// (e.g. an --insecure server).
StatusOr<PeerIdentity> peer_identity(const grpc::ServerContext& context);
// The same from the certificate a verified TLS session of our own presented (PEM).
StatusOr<PeerIdentity> peer_identity_from_pem(const std::string& pem);

}  // namespace atl::transport
