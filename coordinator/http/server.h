// The dashboard's HTTPS server (Boost.Beast over OpenSSL, TLS 1.3 only): the REST API and
// static files of api.h, and live events as server-sent events.
//
// Threads: `threads` workers run one io_context; each connection is a strand. Every read and
// write has a deadline (handshake 10 s, request 30 s, response 30 s); an event stream has no
// idle limit but a comment ping every 15 s, and is dropped when it falls 1024 events behind.
// Bodies over max_body_bytes get 413, headers over 16 KiB 431, unparsable requests 400.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/static_files.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"

namespace atl::coordinator::http {

struct HttpOptions {
  std::string listen = "127.0.0.1:0";     // HOST:PORT; port 0 picks a free one (see port())
  std::string tls_dir;                    // certificate directory (atoll ca)
  std::string cert_name = "coordinator";  // <tls_dir>/<cert_name>.crt and .key
  std::vector<Mount> mounts;              // static files; empty = API only
  // `GET /metrics` (viewer token): the text of the coordinator's metrics; empty = not served.
  std::function<std::string()> metrics;
  uint64_t max_body_bytes = 1 << 20;
  uint32_t max_connections = 256;
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
