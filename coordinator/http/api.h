// The REST API and static files, independent of the transport: a Request in, a Response out
// (server.cc speaks HTTPS with Boost.Beast and streams the live events).
//
// Routes (JSON unless noted; {id} = experiment id):
//   GET    /api/health                        no token
//   GET    /api/openapi.json                  no token: the OpenAPI 3 document
//   GET    /api/whoami                        the caller's role
//   GET    /api/experiments                   list
//   POST   /api/experiments                   create (admin): config as JSON (config_json.h)
//   GET    /api/experiments/{id}              one experiment
//   DELETE /api/experiments/{id}              delete (admin)
//   POST   /api/experiments/{id}/start|pause|resume|stop   (admin)
//   GET    /api/experiments/{id}/nodes        node table
//   GET    /api/experiments/{id}/subnets      Hydra: each site's subnetwork (live experiment)
//   GET    /api/experiments/{id}/rounds       ?from=R&limit=N (limit ≤ 1000, default 200: last)
//   GET    /api/experiments/{id}/metrics      ?max_points=N (2..5000, default 500)
//   GET    /api/experiments/{id}/checkpoint   safetensors of the current θ (octet-stream)
//   GET    /api/events  /api/experiments/{id}/events   live events (text/event-stream)
//   GET    /api/tokens                        token hashes, roles, labels (admin)
//   POST   /api/tokens                        create (admin): {"role", "label"}; the token is in
//                                             this response only
//   DELETE /api/tokens/{hash-prefix}          revoke (admin; ≥ 8 hex digits, unique)
//   GET    /metrics                           Prometheus text format 0.0.4 (viewer or admin
//                                             token; coordinator/coordinator_metrics.h)
//   GET    anything else                      static files (static_files.h), no token; ETag and
//                                             304 on If-None-Match, gzip when accepted
// HEAD is answered as GET (the server leaves the body out). JSON bodies with a key twice in one
// object are refused (400).
// Errors: {"error": "<one line>", "field": "<config key or absent>"} with 400 (bad input),
// 401 (no or unknown token), 403 (viewer changing something), 404 (unknown id or route),
// 405 (method), 409 (state conflict, name taken), 413 (body too large), 500.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/auth.h"
#include "coordinator/http/static_files.h"
#include "coordinator/store.h"

namespace atl::coordinator::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as received
  std::string authorization;
  std::string body;
  std::string accept_encoding;  // static files: gzip when it accepts it
  std::string if_none_match;    // static files: 304 when it matches the file's ETag
};

struct Response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set when the server should stream live events instead of sending `body`: the experiment
  // id whose events are wanted ("" = every experiment).
  std::optional<std::string> stream;
  // With `stream`: the hash of the token that opened it; revoking that token ends the stream.
  std::string stream_token_hash;
};

// The text of `GET /metrics` (Prometheus' exposition format); empty: the route answers 404.
using MetricsText = std::function<std::string()>;

class Api {
 public:
  Api(ExperimentManager& manager, Store& store, std::vector<Mount> mounts,
      MetricsText metrics = {});
  Response handle(const Request& request) const;
  // Called with a token's hash once DELETE /api/tokens has revoked it, before the answer is
  // sent: the server ends the event streams that token opened (a token checked once, at the
  // stream's start, would otherwise keep receiving events). Set before serving.
  void on_token_revoked(std::function<void(const std::string& token_hash)> listener);

  // A JSON error response: {"error": message[, "field": field]}.
  static Response error(unsigned status, const std::string& message, const std::string& field = "");
  static unsigned http_status(const Status& s);

 private:
  Response handle_api(const Request& request, const std::string& path,
                      const std::string& query) const;
  Response handle_tokens(const Request& request, const std::vector<std::string>& seg,
                         Role role) const;
  Response handle_metrics(const Request& request) const;

  ExperimentManager& manager_;
  Store& store_;
  StaticFiles files_;
  MetricsText metrics_;
  std::function<void(const std::string&)> token_revoked_;
};

// The OpenAPI 3.0 document served at /api/openapi.json.
const std::string& openapi_json();

}  // namespace atl::coordinator::http
