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

namespace atl::transport {
namespace {

using Clock = std::chrono::steady_clock;

struct SslCtxDeleter {
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
};
struct SslDeleter {
  void operator()(SSL* p) const { SSL_free(p); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using SslPtr = std::unique_ptr<SSL, SslDeleter>;

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// SIGPIPE blocked on this thread while the probe talks to a server that may have hung up: its
// writes then fail with EPIPE instead of killing the process (OpenSSL writes with write(2), not
// send(2) with MSG_NOSIGNAL). A SIGPIPE raised meanwhile is consumed before unblocking.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec no_wait{};
      (void)sigtimedwait(&pipe_, nullptr, &no_wait);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
};

int millis_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(left.count(), 0));
}

// "HOST" and "PORT" out of "HOST:PORT" or "[V6]:PORT".
bool split_target(const std::string& target, std::string* host, std::string* port) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) return false;
  *host = target.substr(0, colon);
  *port = target.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  return true;
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A connected TCP socket, blocking, its sends and receives bounded by what is left until
// `deadline`; fd -1 and *error on failure.
Socket connect_tcp(const std::string& host, const std::string& port, Clock::time_point deadline,
                   std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *error = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return Socket();
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  *error = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol));
    if (s.fd() < 0) {
      *error = std::strerror(errno);
      continue;
    }
    int err = ::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      const int ready = ::poll(&p, 1, millis_left(deadline));
      socklen_t len = sizeof(err);
      if (ready <= 0)
        err = ETIMEDOUT;
      else if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err != 0) {
      *error = std::strerror(err);
      continue;
    }
    const int flags = ::fcntl(s.fd(), F_GETFL);
    (void)::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
    const int ms = std::max(millis_left(deadline), 1);
    const timeval tv{ms / 1000, (ms % 1000) * 1000};
    (void)::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)::setsockopt(s.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return s;
  }
  return Socket();
}

// TLS 1.3, trusting identity.ca_pem only, presenting identity's certificate, offering h2.
SslCtxPtr client_context(const ClientIdentity& identity, std::string* error) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1) {
    *error = "cannot set up TLS: " + ossl::last_error();
    return nullptr;
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
  ossl::BioPtr bio(
      BIO_new_mem_buf(identity.ca_pem.data(), static_cast<int>(identity.ca_pem.size())));
  int cas = 0;
  while (bio) {
    ossl::X509Ptr ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!ca) break;
    if (X509_STORE_add_cert(store, ca.get()) == 1) ++cas;
  }
  ossl::last_error();  // the end of the PEM text reads as an error
  auto cert = ossl::parse_certificate_pem(identity.cert_pem, "client certificate");
  auto key = ossl::parse_private_key_pem(identity.key_pem, "client key");
  if (cas == 0 || !cert.ok() || !key.ok() || SSL_CTX_use_certificate(ctx.get(), cert->get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key->get()) != 1) {
    *error = "cannot load this client's CA, certificate or key: " + ossl::last_error();
    return nullptr;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  return ctx;
}

// The TLS alert a failed call received (OpenSSL reports it as the reason
// SSL_AD_REASON_OFFSET + alert), or -1.
int received_alert(unsigned long err) {
  const int reason = ERR_GET_REASON(err);
  return reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256
             ? reason - SSL_AD_REASON_OFFSET
             : -1;
}

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

bool is_not_tls(unsigned long err) {
  const int reason = ERR_GET_REASON(err);
  return reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
         reason == SSL_R_HTTP_REQUEST || reason == SSL_R_UNKNOWN_PROTOCOL;
}

// Why an SSL call that returned `rc` failed.
struct SslFailure {
  std::string detail;      // in a few words: "connection closed", "TLS alert 'unknown CA'", ...
  int alert = -1;          // the TLS alert the server sent, if any
  bool not_tls = false;    // the server answered with bytes that are not TLS
  bool timed_out = false;  // nothing came before the deadline
};

SslFailure ssl_failure(SSL* ssl, int rc, int saved_errno) {
  SslFailure f;
  const int kind = SSL_get_error(ssl, rc);
  unsigned long err = 0;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) err = e;
  if (err != 0) {
    f.alert = received_alert(err);
    f.not_tls = is_not_tls(err);
    const char* reason = ERR_reason_error_string(err);
    if (f.alert >= 0)
      f.detail = std::string("TLS alert '") + SSL_alert_desc_string_long(f.alert) + "'";
    else if (ERR_GET_REASON(err) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
      f.detail = "connection closed";
    else
      f.detail = reason != nullptr ? reason : "TLS error";
  } else if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE || saved_errno == EAGAIN ||
             saved_errno == EWOULDBLOCK) {
    f.timed_out = true;
    f.detail = "timed out";
  } else if (kind == SSL_ERROR_ZERO_RETURN || saved_errno == 0) {
    f.detail = "connection closed";
  } else {
    f.detail = std::strerror(saved_errno);
  }
  return f;
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
  const SslFailure f = ssl_failure(ssl, rc, errno);
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
  if (!split_target(target, &host, &port))
    return {ProbeOutcome::kUnreachable, "'" + target + "' is not HOST:PORT"};
  SslCtxPtr ctx = client_context(identity, &error);
  if (!ctx) return {ProbeOutcome::kUnreachable, error};
  Socket sock = connect_tcp(host, port, deadline, &error);
  if (sock.fd() < 0) return {ProbeOutcome::kUnreachable, error};

  const SigpipeBlock no_sigpipe;
  SslPtr ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), sock.fd()) != 1)
    return {ProbeOutcome::kUnreachable, "cannot set up TLS: " + ossl::last_error()};
  if (!is_ip_literal(host)) SSL_set_tlsext_host_name(ssl.get(), host.c_str());
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
  const SslFailure f = ssl_failure(ssl.get(), rc, saved_errno);
  if (f.not_tls) return {ProbeOutcome::kNotTls, f.detail};
  if (f.alert >= 0 && is_certificate_alert(f.alert))
    return {ProbeOutcome::kClientCertificateRefused, "it answered with the " + f.detail};
  return {ProbeOutcome::kCut, f.detail};
}

}  // namespace atl::transport
