// The dashboard's HTTPS server (Boost.Beast over OpenSSL, TLS 1.3 only): the REST API and
// static files of api.h, and live events as server-sent events.
//
// Threads: `threads` workers run one io_context; each connection is a strand. Every phase of a
// connection has a deadline (HttpLimits: TLS handshake, request line and headers, keep-alive
// idle; request body 30 s, response 30 s); an event stream has no idle limit but a comment ping
// every 15 s, is dropped when it falls 1024 events behind, and ends when the token that opened
// it is revoked (Api::on_token_revoked). HEAD gets the GET answer's headers without the body.
// Connections are capped in all and per client address (transport::ConnectionTable): over a cap,
// the connection idle longest (handshaking, or waiting for request headers) is closed to make room,
// so idle connections cannot lock out a client that sends a request (docs/decisions.md, "Connection
// limits"). Bodies over max_body_bytes get 413, headers over 16 KiB 431, unparsable requests 400.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/static_files.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"
#include "transport/connection_table.h"

namespace atl::coordinator::http {

// Connection limits of the dashboard (flags of `atoll coordinator`, docs/dashboard.md).
struct HttpLimits {
  // Open connections in all and per client IP address; over either, the longest idle one is
  // closed to make room (a new connection is refused only when none is idle).
  transport::ConnectionCaps caps{.max_connections = 256, .max_per_address = 64, .evict_idle = true};
  // accept → TLS handshake done.
  std::chrono::milliseconds handshake_timeout{10000};
  // The request line and headers: on a new connection from the end of the handshake, on a
  // keep-alive connection from the request's first byte.
  std::chrono::milliseconds header_timeout{10000};
  // Keep-alive: from a response sent to the next request's first byte.
  std::chrono::milliseconds idle_timeout{30000};
};

struct HttpOptions {
  std::string listen = "127.0.0.1:0";     // HOST:PORT; port 0 picks a free one (see port())
  std::string tls_dir;                    // certificate directory (atoll ca)
  std::string cert_name = "coordinator";  // <tls_dir>/<cert_name>.crt and .key
  std::vector<Mount> mounts;              // static files; empty = API only
  // `GET /metrics` (viewer token): the text of the coordinator's metrics; empty = not served.
  std::function<std::string()> metrics;
  uint64_t max_body_bytes = 1 << 20;
  HttpLimits limits;
  int threads = 2;
};

class HttpServer {
 public:
  // Binds, loads the certificate and starts serving. `manager` and `store` must outlive it.
  static StatusOr<std::unique_ptr<HttpServer>> start(ExperimentManager& manager, Store& store,
                                                     HttpOptions options);
  ~HttpServer();  // shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Connections open now (accepted and not yet closed), in all and from one IP address.
  size_t open_connections() const;
  size_t open_connections(const std::string& address) const;
  // Connections closed to make room for a new one, and new ones refused, since the start.
  uint64_t evicted_connections() const;
  uint64_t refused_connections() const;
  // "https://HOST:PORT/" (a wildcard listen address shows as "localhost").
  std::string url() const;
  // Closes the listener and every connection, joins the workers. Idempotent.
  void shutdown();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl::coordinator::http
