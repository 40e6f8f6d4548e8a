#include "transport/tls/signed_statement.h"

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "transport/tls/ca.h"
#include "transport/tls/openssl_util.h"

namespace atl::transport {

using namespace ossl;

namespace {

using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, Deleter<EVP_MD_CTX_free>>;

}  // namespace

StatusOr<std::string> sign_statement(const std::string& key_pem, std::string_view message) {
  ATOLL_ASSIGN_OR_RETURN(PkeyPtr key, parse_private_key_pem(key_pem, "signing key"));
  MdCtxPtr ctx(EVP_MD_CTX_new());
  size_t length = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    return Internal("cannot sign with this node's key: " + last_error());
  std::string signature(length, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    return Internal("cannot sign with this node's key: " + last_error());
  signature.resize(length);
  return signature;
}

Status verify_node_statement(const std::string& ca_pem, const std::string& certificate_pem,
                             const std::string& node_id, std::string_view message,
                             std::string_view signature) {
  auto denied = [&](const std::string& why) {
    return PermissionDenied("the statement of '" + node_id + "' " + why);
  };
  auto cert = parse_certificate_pem(certificate_pem, "the certificate of '" + node_id + "'");
  if (!cert.ok()) return denied("comes with no readable certificate");
  ATOLL_ASSIGN_OR_RETURN(X509Ptr ca, parse_certificate_pem(ca_pem, "the experiment CA"));
  X509StorePtr store(X509_STORE_new());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr) != 1)
    return Internal("cannot set up certificate verification: " + last_error());
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    last_error();
    return denied(std::string("comes with a certificate the experiment CA does not vouch for (") +
                  X509_verify_cert_error_string(err) + ")");
  }
  auto info = inspect_certificate_pem(certificate_pem);
  if (!info.ok()) return denied("comes with no readable certificate");
  if (info->common_name != node_id)
    return denied("comes with the certificate of '" + info->common_name + "'");
  if (info->role != role_name(Role::kNode))
    return denied("comes with a certificate of role '" + info->role + "', not 'node'");
  EVP_PKEY* key = X509_get0_pubkey(cert->get());
  MdCtxPtr md(EVP_MD_CTX_new());
  if (!key || !md || EVP_DigestVerifyInit(md.get(), nullptr, EVP_sha256(), nullptr, key) != 1)
    return Internal("cannot set up signature verification: " + last_error());
  const int ok = EVP_DigestVerify(
      md.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
      reinterpret_cast<const unsigned char*>(message.data()), message.size());
  last_error();
  if (ok != 1) return denied("does not carry its signature (the signed content was changed)");
  return Status::Ok();
}

}  // namespace atl::transport
