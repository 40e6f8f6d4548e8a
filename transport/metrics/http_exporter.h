// A plain-HTTP listener that answers `GET /metrics` with Prometheus' text format, for scrapers
// inside a cluster: `atoll node --metrics HOST:PORT` and `atoll coordinator --metrics HOST:PORT`.
// It has NO authentication and no TLS: bind it to a private address (docs/dashboard.md).
//
// Small on purpose (Boost.Beast, one thread): GET /metrics only (405 for another method, 404
// for another path), one request per connection (Connection: close), request headers at most
// 8 KiB and no body (431 / 413), 10 s to read the request and 10 s to write the answer, at
// most 16 connections at once (more are closed at accept).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kernels/core/status.h"

namespace atl::transport::metrics {

class HttpExporter {
 public:
  // Binds `listen` (HOST:PORT, an IP address or localhost; port 0 = any free port) and serves
  // render()'s text, called on the exporter's thread for each scrape. `flag` names the option in
  // error messages ("--metrics").
  static StatusOr<std::unique_ptr<HttpExporter>> start(const std::string& listen,
                                                       std::function<std::string()> render,
                                                       const std::string& flag = "--metrics");
  ~HttpExporter();  // shutdown()
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  int port() const;
  // "http://HOST:PORT/metrics" (a wildcard address shows as "localhost").
  std::string url() const;
  // Closes the listener and every connection and joins the thread. Idempotent.
  void shutdown();

  struct Impl;

 private:
  explicit HttpExporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl::transport::metrics
