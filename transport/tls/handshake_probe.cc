#include "transport/tls/handshake_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include "transport/tls/openssl_util.h"
#include "transport/tls/tls_socket.h"

namespace atl::transport {
namespace {

using tls_socket::Clock;
using tls_socket::SslFailure;
using tls_socket::SslPtr;

bool is_certificate_alert(int alert) {
  switch (alert) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_ACCESS_DENIED:
    case SSL_AD_CERTIFICATE_REQUIRED:
      return true;
    default:
      return false;
  }
}

// After our side of the handshake: the server's first answer to the HTTP/2 preface decides.
ProbeResult after_handshake(SSL* ssl) {
  // The client connection preface, then an empty SETTINGS frame (RFC 9113 §3.4).
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  const int preface_bytes = static_cast<int>(sizeof(kPreface) - 1);
  errno = 0;
  int rc = SSL_write(ssl, kPreface, preface_bytes);
  if (rc > 0) {
    char buf[256];
    errno = 0;
    rc = SSL_read(ssl, buf, sizeof(buf));
    if (rc > 0) return {ProbeOutcome::kAccepted, "the server answered HTTP/2"};
  }
  const SslFailure f = tls_socket::ssl_failure(ssl, rc, errno);
  if (f.timed_out)
    return {ProbeOutcome::kAccepted, "the server kept the connection open without answering"};
  if (f.alert >= 0 && !is_certificate_alert(f.alert)) return {ProbeOutcome::kCut, f.detail};
  if (f.alert >= 0)
    return {ProbeOutcome::kClientCertificateRefused, "it answered with the " + f.detail};
  return {ProbeOutcome::kClientCertificateRefused,
          "it hung up right after the TLS handshake, before answering: " + f.detail};
}

}  // namespace

ProbeResult probe_tls_handshake(const std::string& target, const ClientIdentity& identity,
                                std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string host, port, error;
  if (!tls_socket::split_target(target, &host, &port))
    return {ProbeOutcome::kUnreachable, "'" + target + "' is not HOST:PORT"};
  tls_socket::SslCtxPtr ctx = tls_socket::client_context(identity, &error);
  if (!ctx) return {ProbeOutcome::kUnreachable, error};
  // Offers h2, as gRPC does: the server's answer to the HTTP/2 preface is the verdict.
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  tls_socket::Socket sock = tls_socket::connect_tcp(host, port, deadline, &error);
  if (sock.fd() < 0) return {ProbeOutcome::kUnreachable, error};

  const tls_socket::SigpipeBlock no_sigpipe;
  SslPtr ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), sock.fd()) != 1)
    return {ProbeOutcome::kUnreachable, "cannot set up TLS: " + ossl::last_error()};
  if (!tls_socket::is_ip_literal(host)) SSL_set_tlsext_host_name(ssl.get(), host.c_str());
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_connect(ssl.get());
  if (rc == 1) return after_handshake(ssl.get());

  const int saved_errno = errno;
  const long verify = SSL_get_verify_result(ssl.get());
  if (verify != X509_V_OK) {
    ossl::last_error();
    return {ProbeOutcome::kServerCertificateRefused, X509_verify_cert_error_string(verify), verify};
  }
  const SslFailure f = tls_socket::ssl_failure(ssl.get(), rc, saved_errno);
  if (f.not_tls) return {ProbeOutcome::kNotTls, f.detail};
  if (f.alert >= 0 && is_certificate_alert(f.alert))
    return {ProbeOutcome::kClientCertificateRefused, "it answered with the " + f.detail};
  return {ProbeOutcome::kCut, f.detail};
}

}  // namespace atl::transport
