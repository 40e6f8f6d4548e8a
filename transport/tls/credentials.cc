#include "transport/tls/credentials.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

#include "kernels/core/file_io.h"
#include "transport/tls/openssl_util.h"
#include "transport/tls/tls13_server.h"

namespace atl::transport {
namespace {

using namespace ossl;

struct LoadedIdentity {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

std::string side(Role role) {
  return role == Role::kServer ? "server" : "client";
}

// Reads and checks the three files; on success returns their PEM text for gRPC.
StatusOr<LoadedIdentity> load_identity(const std::string& dir, const std::string& name, Role role) {
  ATOLL_RETURN_IF_ERROR(validate_cert_name(name));
  LoadedIdentity out;
  const std::string who = std::string(role_name(role)) + " " + name;

  auto ca_pem = read_file(ca_cert_path(dir));
  if (!ca_pem.ok()) {
    if (ca_pem.status().code() == StatusCode::kNotFound) {
      return NotFound("no CA certificate (ca.crt) in " + dir +
                      ": copy the experiment's ca.crt there, or create a CA with `atoll ca init "
                      "--dir " +
                      dir + "`");
    }
    return ca_pem.status();
  }
  out.ca_pem = std::move(ca_pem).value();
  auto cert_pem = read_file(cert_path(dir, name));
  if (!cert_pem.ok()) {
    if (cert_pem.status().code() == StatusCode::kNotFound) {
      return NotFound("no certificate for " + who + " in " + dir + ": " +
                      issue_instructions(dir, name, role, /*replace=*/false));
    }
    return cert_pem.status();
  }
  out.cert_pem = std::move(cert_pem).value();
  ATOLL_RETURN_IF_ERROR(check_private_key_mode(key_path(dir, name)));
  auto key_pem = read_file(key_path(dir, name));
  if (!key_pem.ok()) {
    if (key_pem.status().code() == StatusCode::kNotFound) {
      return NotFound("no private key for " + who + " in " + dir + " (" + name +
                      ".key): copy it next to " + name + ".crt, or " +
                      issue_instructions(dir, name, role, /*replace=*/true));
    }
    return key_pem.status();
  }
  out.key_pem = std::move(key_pem).value();

  ATOLL_ASSIGN_OR_RETURN(X509Ptr ca, parse_certificate_pem(out.ca_pem, ca_cert_path(dir)));
  ATOLL_ASSIGN_OR_RETURN(X509Ptr cert, parse_certificate_pem(out.cert_pem, cert_path(dir, name)));
  ATOLL_ASSIGN_OR_RETURN(PkeyPtr key, parse_private_key_pem(out.key_pem, key_path(dir, name)));

  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    last_error();
    return InvalidArgument(name + ".key does not belong to " + name + ".crt in " + dir + ": " +
                           issue_instructions(dir, name, role, /*replace=*/true));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(ca.get())) < 0) {
    return FailedPrecondition("the CA certificate in " + dir + " expired on " +
                              time_to_string(X509_get0_notAfter(ca.get())) +
                              ": create a new CA and re-issue all certificates");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return FailedPrecondition("certificate " + name + " expired on " +
                              time_to_string(X509_get0_notAfter(cert.get())) + ": " +
                              issue_instructions(dir, name, role, /*replace=*/true));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    return FailedPrecondition("certificate " + name + " is not valid before " +
                              time_to_string(X509_get0_notBefore(cert.get())) +
                              ": check this machine's clock");
  }

  // Full chain verification against exactly this CA, for this TLS side (checks the signature,
  // CA constraints and the extended key usage the role implies).
  X509StorePtr store(X509_STORE_new());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return Internal("cannot set up certificate verification: " + last_error());
  }
  X509_STORE_CTX_set_purpose(
      ctx.get(), role == Role::kServer ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    last_error();
    switch (err) {
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
        return PermissionDenied("certificate " + name + " was not issued by the CA in " + dir +
                                ": " + issue_instructions(dir, name, role, /*replace=*/true));
      case X509_V_ERR_INVALID_PURPOSE:
        return InvalidArgument(
            "certificate " + name + " cannot be used as a TLS " + side(role) +
            " (wrong role): " + issue_instructions(dir, name, role, /*replace=*/true));
      default:
        return PermissionDenied("certificate " + name + " does not verify against the CA in " +
                                dir + ": " + X509_verify_cert_error_string(err));
    }
  }
  return out;
}

}  // namespace

Status validate_identity(const std::string& dir, const std::string& name, Role role) {
  auto loaded = load_identity(dir, name, role);
  return loaded.ok() ? Status::Ok() : loaded.status();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials(
    const std::string& dir, const std::string& server_name) {
  ATOLL_ASSIGN_OR_RETURN(LoadedIdentity id, load_identity(dir, server_name, Role::kServer));
  return tls13_mtls_server_credentials(id.ca_pem, id.key_pem, id.cert_pem);
}

StatusOr<TlsIdentity> server_identity(const std::string& dir, const std::string& server_name) {
  ATOLL_ASSIGN_OR_RETURN(LoadedIdentity id, load_identity(dir, server_name, Role::kServer));
  return TlsIdentity{std::move(id.ca_pem), std::move(id.cert_pem), std::move(id.key_pem)};
}

StatusOr<ClientTls> client_credentials(const std::string& dir, const std::string& node_name,
                                       const std::string& server_name_override) {
  ATOLL_ASSIGN_OR_RETURN(LoadedIdentity id, load_identity(dir, node_name, Role::kNode));
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = id.ca_pem;  // only this CA, never the system store
  options.pem_private_key = id.key_pem;
  options.pem_cert_chain = id.cert_pem;
  ClientTls out;
  out.credentials = grpc::SslCredentials(options);
  out.server_name_override = server_name_override;
  out.identity = std::make_shared<const ClientIdentity>(
      ClientIdentity{std::move(id.ca_pem), std::move(id.cert_pem), std::move(id.key_pem)});
  if (!out.credentials) return Internal("gRPC refused the client key/certificate");
  return out;
}

std::shared_ptr<grpc::ServerCredentials> insecure_server_credentials() {
  return grpc::InsecureServerCredentials();
}

ClientTls insecure_client_credentials() {
  ClientTls out;
  out.credentials = grpc::InsecureChannelCredentials();
  out.insecure = true;
  return out;
}

StatusOr<PeerIdentity> peer_identity(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) {
    return Unauthenticated("the caller presented no verified client certificate (mTLS required)");
  }
  auto pems = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) return Unauthenticated("the caller's TLS session carries no certificate");
  return peer_identity_from_pem(std::string(pems.front().data(), pems.front().size()));
}

StatusOr<PeerIdentity> peer_identity_from_pem(const std::string& pem) {
  auto info = inspect_certificate_pem(pem);
  if (!info.ok())
    return Unauthenticated("unreadable client certificate: " + info.status().message());
  if (info->common_name.empty()) return Unauthenticated("client certificate has no common name");
  PeerIdentity id;
  id.name = info->common_name;
  id.role = info->role;
  id.fingerprint = info->fingerprint_sha256;
  id.serial_hex = info->serial_hex;
  id.certificate_pem = pem;
  return id;
}

}  // namespace atl::transport
