// Blocking TLS 1.3 sockets of Atoll's own, outside gRPC: the handshake probe
// (tls/handshake_probe.h) and the bulk lane (transport/bulk_lane.h) share them.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <string>

#include "transport/tls/credentials.h"
#include "transport/tls/openssl_util.h"

namespace atl::transport::tls_socket {

using Clock = std::chrono::steady_clock;

using SslCtxPtr = std::unique_ptr<SSL_CTX, ossl::Deleter<SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, ossl::Deleter<SSL_free>>;

// Owns a file descriptor (closed on destruction).
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// SIGPIPE blocked on this thread while it talks to a peer that may have hung up: its writes then
// fail with EPIPE instead of killing the process (OpenSSL writes with write(2), not send(2) with
// MSG_NOSIGNAL). A SIGPIPE raised meanwhile is consumed before unblocking.
class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
};

int millis_left(Clock::time_point deadline);

// "HOST" and "PORT" out of "HOST:PORT" or "[V6]:PORT".
bool split_target(const std::string& target, std::string* host, std::string* port);

bool is_ip_literal(const std::string& host);

// Bounds every blocking send and receive on `fd` (SO_SNDTIMEO, SO_RCVTIMEO; at least 1 ms).
void set_io_timeout(int fd, std::chrono::milliseconds timeout);

// A connected TCP socket (TCP_NODELAY), blocking, its sends and receives bounded by what is left
// until `deadline`; fd -1 and *error on failure.
Socket connect_tcp(const std::string& host, const std::string& port, Clock::time_point deadline,
                   std::string* error);

// Adds the certificates of a PEM text (one or more) to `store`; how many it added.
int add_ca_certificates(X509_STORE* store, const std::string& pem);

// TLS 1.3 only, trusting identity.ca_pem only (never the system store), presenting identity's
// certificate, verifying the peer; null and *error on failure.
SslCtxPtr client_context(const ClientIdentity& identity, std::string* error);

// Why an SSL call that returned `rc` failed.
struct SslFailure {
  std::string detail;      // in a few words: "connection closed", "TLS alert 'unknown CA'", ...
  int alert = -1;          // the TLS alert the peer sent, if any
  bool not_tls = false;    // the peer answered with bytes that are not TLS
  bool timed_out = false;  // nothing came before the socket's timeout
};
// Reads (and clears) OpenSSL's error queue; `saved_errno` is errno right after the call.
SslFailure ssl_failure(SSL* ssl, int rc, int saved_errno);

}  // namespace atl::transport::tls_socket
