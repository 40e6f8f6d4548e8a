#include "transport/tls/tls_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "transport/tls/openssl_util.h"

namespace atl::transport::tls_socket {

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

SigpipeBlock::SigpipeBlock() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlock::~SigpipeBlock() {
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    const timespec no_wait{};
    (void)sigtimedwait(&pipe_, nullptr, &no_wait);
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

int millis_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(left.count(), 0));
}

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

void set_io_timeout(int fd, std::chrono::milliseconds timeout) {
  const int64_t ms = std::max<int64_t>(timeout.count(), 1);
  const timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

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
    const int one = 1;
    (void)::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set_io_timeout(s.fd(), std::chrono::milliseconds(millis_left(deadline)));
    return s;
  }
  return Socket();
}

int add_ca_certificates(X509_STORE* store, const std::string& pem) {
  ossl::BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  int cas = 0;
  while (bio) {
    ossl::X509Ptr ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!ca) break;
    if (X509_STORE_add_cert(store, ca.get()) == 1) ++cas;
  }
  ossl::last_error();  // the end of the PEM text reads as an error
  return cas;
}

SslCtxPtr client_context(const ClientIdentity& identity, std::string* error) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1) {
    *error = "cannot set up TLS: " + ossl::last_error();
    return nullptr;
  }
  const int cas = add_ca_certificates(SSL_CTX_get_cert_store(ctx.get()), identity.ca_pem);
  auto cert = ossl::parse_certificate_pem(identity.cert_pem, "client certificate");
  auto key = ossl::parse_private_key_pem(identity.key_pem, "client key");
  if (cas == 0 || !cert.ok() || !key.ok() || SSL_CTX_use_certificate(ctx.get(), cert->get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key->get()) != 1) {
    *error = "cannot load this client's CA, certificate or key: " + ossl::last_error();
    return nullptr;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

namespace {

// The TLS alert a failed call received (OpenSSL reports it as the reason
// SSL_AD_REASON_OFFSET + alert), or -1.
int received_alert(unsigned long err) {
  const int reason = ERR_GET_REASON(err);
  return reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256
             ? reason - SSL_AD_REASON_OFFSET
             : -1;
}

bool is_not_tls(unsigned long err) {
  const int reason = ERR_GET_REASON(err);
  return reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
         reason == SSL_R_HTTP_REQUEST || reason == SSL_R_UNKNOWN_PROTOCOL;
}

}  // namespace

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

}  // namespace atl::transport::tls_socket
