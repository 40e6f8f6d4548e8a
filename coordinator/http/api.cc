#include "coordinator/http/api.h"

#include <boost/json.hpp>
#include <charconv>
#include <map>
#include <optional>

#include "algorithms/data/json_duplicates.h"
#include "algorithms/model/subnet.h"
#include "coordinator/http/auth.h"
#include "coordinator/http/config_json.h"
#include "coordinator/json_views.h"
#include "transport/metrics/registry.h"

namespace atl::coordinator::http {
namespace json = boost::json;

namespace {

Response json_response(unsigned status, const json::value& v) {
  Response r;
  r.status = status;
  r.body = json::serialize(v);
  return r;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (!out.empty() && out.back().empty()) out.pop_back();  // trailing '/'
  return out;
}

std::map<std::string, std::string> parse_query(const std::string& q) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start < q.size()) {
    size_t end = q.find('&', start);
    if (end == std::string::npos) end = q.size();
    const std::string kv = q.substr(start, end - start);
    const size_t eq = kv.find('=');
    auto k = percent_decode(kv.substr(0, eq));
    auto v = percent_decode(eq == std::string::npos ? "" : kv.substr(eq + 1));
    if (k.ok() && v.ok()) out[*k] = *v;
    start = end + 1;
  }
  return out;
}

// A query integer in [lo, hi]; `def` when absent.
StatusOr<uint64_t> query_uint(const std::map<std::string, std::string>& q, const std::string& key,
                              uint64_t def, uint64_t lo, uint64_t hi) {
  auto it = q.find(key);
  if (it == q.end()) return def;
  uint64_t v = 0;
  const auto* b = it->second.data();
  const auto* e = b + it->second.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v < lo || v > hi)
    return InvalidArgument("query parameter " + key + " must be an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

// A request body as JSON into *value; otherwise the 400 answer: malformed JSON, or a key given
// twice in one object, which boost::json would settle silently by keeping the last
// ({"role":"viewer","role":"admin"} would create an admin token).
std::optional<Response> parse_json_body(const std::string& body, json::value* value) {
  if (const std::string key = algorithms::first_duplicate_key(body); !key.empty()) {
    const std::string shown = key.substr(0, 64);
    return Api::error(400, "duplicate key \"" + shown + "\" in the JSON body: send each key once",
                      shown);
  }
  boost::system::error_code ec;
  *value = json::parse(body, ec);
  if (ec) return Api::error(400, "malformed JSON body: " + ec.message());
  return std::nullopt;
}

// At most this many errors are listed: a config of 50,000 unknown keys would otherwise answer
// megabytes, and nobody fixes more than the first hundred before sending it again.
constexpr size_t kMaxListedErrors = 100;

// The first error as `error` and `field` (as every error answer) and all of them, the first
// included, as `errors`: [{"error", "field"}], so that a form marks every field at once. Past
// kMaxListedErrors, one last entry (without a field) says how many more there are.
Response config_errors(const std::vector<Status>& errors) {
  json::object o;
  o["error"] = errors.front().message();
  if (std::string f = field_of_message(errors.front().message()); !f.empty()) o["field"] = f;
  json::array list;
  for (size_t i = 0; i < errors.size() && i < kMaxListedErrors; ++i) {
    json::object e{{"error", errors[i].message()}};
    if (std::string f = field_of_message(errors[i].message()); !f.empty()) e["field"] = f;
    list.push_back(std::move(e));
  }
  if (errors.size() > kMaxListedErrors)
    list.push_back(
        json::object{{"error", "… and " + std::to_string(errors.size() - kMaxListedErrors) +
                                   " more errors (fix the ones above and send the config again)"}});
  o["errors"] = std::move(list);
  return json_response(Api::http_status(errors.front()), o);
}

}  // namespace

Api::Api(ExperimentManager& manager, Store& store, std::vector<Mount> mounts, MetricsText metrics)
    : manager_(manager), store_(store), files_(std::move(mounts)), metrics_(std::move(metrics)) {}

void Api::on_token_revoked(std::function<void(const std::string& token_hash)> listener) {
  token_revoked_ = std::move(listener);
}

unsigned Api::http_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

Response Api::error(unsigned status, const std::string& message, const std::string& field) {
  json::object o;
  o["error"] = message;
  if (!field.empty()) o["field"] = field;
  return json_response(status, o);
}

Response Api::handle(const Request& req) const {
  // HEAD is answered as GET: the server sends the headers without the body (RFC 9110 §9.3.2).
  if (req.method == "HEAD") {
    Request get = req;
    get.method = "GET";
    return handle(get);
  }
  const size_t qpos = req.target.find('?');
  const std::string path = req.target.substr(0, qpos);
  const std::string query = qpos == std::string::npos ? "" : req.target.substr(qpos + 1);
  if (path.empty() || path[0] != '/') return error(400, "request target must be an absolute path");
  if (path == "/api" || path.compare(0, 5, "/api/") == 0) {
    Response r = handle_api(req, path, query);
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }
  if (path == "/metrics") {
    Response r = handle_metrics(req);
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }
  if (req.method != "GET") return error(405, "static files answer GET and HEAD only");
  auto f = files_.get(path, accepts_gzip(req.accept_encoding));
  if (!f.ok()) {
    if (f.status().code() == StatusCode::kInvalidArgument) return error(400, f.status().message());
    return error(404, "not found: " + path.substr(0, 200));
  }
  Response r;
  r.content_type = f->content_type;
  // no-cache: the browser keeps the file and revalidates it with If-None-Match every time.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("ETag", f->etag);
  r.headers.emplace_back("Vary", "Accept-Encoding");
  if (!req.if_none_match.empty() && etag_matches(req.if_none_match, f->etag)) {
    r.status = 304;
    return r;
  }
  if (f->gzip) r.headers.emplace_back("Content-Encoding", "gzip");
  r.body = std::move(f->body);
  return r;
}

Response Api::handle_api(const Request& req, const std::string& path,
                         const std::string& query) const {
  const std::vector<std::string> seg = split_path(path);  // seg[0] == "api"
  const std::string& m = req.method;
  auto method_is = [&](const char* want) { return m == want; };
  if (seg.size() == 2 && seg[1] == "health") {
    if (!method_is("GET")) return error(405, "use GET");
    return json_response(200, json::object{{"ok", true}});
  }
  if (seg.size() == 2 && seg[1] == "openapi.json") {
    if (!method_is("GET")) return error(405, "use GET");
    Response r;
    r.body = openapi_json();
    return r;
  }

  // Everything else needs a token; changes need an admin token.
  std::string token_hash;
  auto role = authenticate(store_, req.authorization, &token_hash);
  if (!role.ok()) {
    Response r = error(http_status(role.status()), role.status().message());
    if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  const bool mutation = !(method_is("GET") || method_is("HEAD"));
  if (mutation && *role != Role::kAdmin)
    return error(403, "this token has the viewer role; changes need an admin token");
  const auto q = parse_query(query);

  if (seg.size() == 2 && seg[1] == "whoami") {
    if (!method_is("GET")) return error(405, "use GET");
    return json_response(200, json::object{{"role", role_name(*role)}});
  }
  if (seg.size() == 2 && seg[1] == "events") {
    if (!method_is("GET")) return error(405, "use GET");
    Response r;
    r.stream = "";
    r.stream_token_hash = token_hash;
    return r;
  }
  if (seg.size() >= 2 && seg[1] == "tokens") return handle_tokens(req, seg, *role);
  if (seg.size() < 2 || seg[1] != "experiments") return error(404, "no such API route");

  if (seg.size() == 2) {
    if (method_is("GET")) {
      auto list = manager_.list();
      if (!list.ok()) return error(http_status(list.status()), list.status().message());
      json::array a;
      for (const auto& s : *list) {
        json::object o = to_json(s);
        // For the list's columns and sorting: final and best bpb, start and duration.
        if (auto t = manager_.totals(s.record.id); t.ok()) {
          o["final_val_bpb"] = t->final_val_bpb ? json::value(*t->final_val_bpb) : json::value();
          o["best_val_bpb"] = t->best_val_bpb ? json::value(*t->best_val_bpb) : json::value();
          o["started_unix_ms"] = t->started_unix_ms;
          o["duration_s"] =
              t->started_unix_ms ? (t->last_commit_unix_ms - t->started_unix_ms) / 1000.0 : 0.0;
        }
        a.push_back(std::move(o));
      }
      return json_response(200, json::object{{"experiments", std::move(a)}});
    }
    if (method_is("POST")) {
      json::value body;
      if (auto refused = parse_json_body(req.body, &body)) return *refused;
      ConfigCheck cfg = check_config_json(body);
      if (!cfg.errors.empty()) return config_errors(cfg.errors);
      auto created = manager_.create(cfg.config);
      if (!created.ok())
        return error(http_status(created.status()), created.status().message(),
                     created.status().code() == StatusCode::kAlreadyExists
                         ? "name"
                         : field_of_message(created.status().message()));
      Response r = json_response(201, to_json(*created));
      r.headers.emplace_back("Location", "/api/experiments/" + created->record.id);
      return r;
    }
    return error(405, "use GET or POST");
  }

  const std::string& id = seg[2];
  if (!valid_id(id)) return error(404, "experiment '" + id.substr(0, 64) + "' does not exist");
  auto fail = [](const Status& s) { return error(http_status(s), s.message()); };

  if (seg.size() == 3) {
    if (method_is("GET")) {
      auto s = manager_.get(id);
      if (!s.ok()) return fail(s.status());
      return json_response(200, to_json(*s));
    }
    if (method_is("DELETE")) {
      if (Status st = manager_.remove(id); !st.ok()) return fail(st);
      return json_response(200, json::object{{"deleted", id}});
    }
    return error(405, "use GET or DELETE");
  }
  if (seg.size() != 4) return error(404, "no such API route");
  const std::string& what = seg[3];

  if (what == "start" || what == "pause" || what == "resume" || what == "stop") {
    if (!method_is("POST")) return error(405, "use POST");
    Status st = what == "start"    ? manager_.start(id)
                : what == "pause"  ? manager_.pause(id)
                : what == "resume" ? manager_.resume(id)
                                   : manager_.stop(id);
    if (!st.ok()) return fail(st);
    auto s = manager_.get(id);
    if (!s.ok()) return fail(s.status());
    return json_response(200, to_json(*s));
  }
  if (!method_is("GET")) return error(405, "use GET");
  if (what == "nodes") {
    auto nodes = manager_.nodes(id);
    if (!nodes.ok()) return fail(nodes.status());
    json::array a;
    for (const auto& n : *nodes) a.push_back(to_json(n));
    return json_response(200, json::object{{"nodes", std::move(a)}});
  }
  if (what == "subnets") {
    auto s = manager_.get(id);
    if (!s.ok()) return fail(s.status());
    auto subnets = manager_.subnets(id);
    if (!subnets.ok()) return fail(subnets.status());
    json::array a;
    for (const auto& [node, text] : *subnets) {
      auto j = subnet_json(node, text, s->config);
      if (!j.ok()) return error(500, "subnetwork of '" + node + "': " + j.status().message());
      a.push_back(std::move(*j));
    }
    const auto& m = s->config.model;
    // The grid's columns are head units: KV groups (a KV head and its query heads; without
    // grouped-query attention one head each), docs/hydra.md "Units".
    const algorithms::ModelConfig mc = model_config(s->config);
    return json_response(200, json::object{{"algorithm", s->config.algorithm},
                                           {"live", s->live},
                                           {"layers", m.layers},
                                           {"heads", m.heads},
                                           {"kv_groups", algorithms::head_units(mc)},
                                           {"heads_per_group", algorithms::heads_per_unit(mc)},
                                           {"ffn_blocks", s->config.hydra.ffn_blocks},
                                           {"subnets", std::move(a)}});
  }
  if (what == "rounds") {
    auto s = manager_.get(id);
    if (!s.ok()) return fail(s.status());
    auto limit = query_uint(q, "limit", 200, 1, 1000);
    if (!limit.ok()) return fail(limit.status());
    const uint64_t total = s->record.current_round;
    const uint64_t last_page = total > *limit ? total - *limit : 0;
    auto from = query_uint(q, "from", last_page, 0, UINT64_MAX / 2);
    if (!from.ok()) return fail(from.status());
    auto rounds = manager_.rounds(id, *from, *limit);
    if (!rounds.ok()) return fail(rounds.status());
    json::array a;
    for (const auto& r : *rounds) a.push_back(to_json(r));
    return json_response(200,
                         json::object{{"total", total}, {"from", *from}, {"rounds", std::move(a)}});
  }
  if (what == "metrics") {
    auto max_points = query_uint(q, "max_points", 500, 2, kMaxSeriesPoints);
    if (!max_points.ok()) return fail(max_points.status());
    auto series = manager_.metrics(id, static_cast<uint32_t>(*max_points));
    if (!series.ok()) return fail(series.status());
    return json_response(200, to_json(*series));
  }
  if (what == "checkpoint") {
    std::string filename;
    auto bytes = manager_.checkpoint(id, &filename);
    if (!bytes.ok()) return fail(bytes.status());
    Response r;
    r.content_type = "application/octet-stream";
    r.body = std::move(bytes).value();
    r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + filename + "\"");
    return r;
  }
  if (what == "events") {
    auto s = manager_.get(id);
    if (!s.ok()) return fail(s.status());
    Response r;
    r.stream = id;
    r.stream_token_hash = token_hash;
    return r;
  }
  return error(404, "no such API route");
}

// Prometheus scrapes with a viewer (or admin) token as its bearer token
// (`authorization: {credentials_file: …}` in a scrape config).
Response Api::handle_metrics(const Request& req) const {
  if (!metrics_) return error(404, "this server does not export metrics");
  auto role = authenticate(store_, req.authorization);
  if (!role.ok()) {
    Response r = error(http_status(role.status()), role.status().message());
    if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  if (req.method != "GET") return error(405, "use GET");
  Response r;
  r.content_type = transport::metrics::kContentType;
  r.body = metrics_();
  return r;
}

// Tokens while the coordinator runs (its store is locked to `atoll token`). Admin only, reads
// included: the list shows who has access.
Response Api::handle_tokens(const Request& req, const std::vector<std::string>& seg,
                            Role role) const {
  if (role != Role::kAdmin) return error(403, "tokens are managed with an admin token");
  auto fail = [](const Status& s) { return error(http_status(s), s.message()); };
  if (seg.size() == 2) {
    if (req.method == "GET") {
      auto tokens = store_.list_tokens();
      if (!tokens.ok()) return fail(tokens.status());
      json::array a;
      for (const auto& t : *tokens)
        a.push_back(json::object{{"hash", t.hash},
                                 {"role", t.role},
                                 {"label", t.label},
                                 {"created_unix_ms", t.created_unix_ms}});
      return json_response(200, json::object{{"tokens", std::move(a)}});
    }
    if (req.method != "POST") return error(405, "use GET or POST");
    json::value body;
    if (auto refused = parse_json_body(req.body, &body)) return *refused;
    if (!body.is_object())
      return error(400,
                   "the body must be a JSON object {\"role\": \"viewer\"|\"admin\", "
                   "\"label\": \"...\"}");
    std::string label;
    std::optional<Role> new_role;
    for (const auto& [key, value] : body.as_object()) {
      if (key == "role") {
        if (!value.is_string()) return error(400, "role must be a string", "role");
        auto r = parse_role(std::string(value.as_string()));
        if (!r.ok()) return error(400, r.status().message(), "role");
        new_role = *r;
      } else if (key == "label") {
        if (!value.is_string()) return error(400, "label must be a string", "label");
        label = std::string(value.as_string());
      } else {
        return error(400,
                     "unknown field '" + std::string(key).substr(0, 64) +
                         "' (a token has a role and a label)",
                     std::string(key).substr(0, 64));
      }
    }
    if (!new_role) return error(400, "role is required: \"viewer\" or \"admin\"", "role");
    auto token = create_token(store_, *new_role, label);
    if (!token.ok()) return fail(token.status());
    // The token itself appears only in this response; the store keeps its hash.
    return json_response(201, json::object{{"token", *token},
                                           {"hash", hash_token(*token)},
                                           {"role", role_name(*new_role)},
                                           {"label", label}});
  }
  if (seg.size() != 3) return error(404, "no such API route");
  if (req.method != "DELETE") return error(405, "use DELETE");
  auto match = find_token(store_, seg[2]);
  if (!match.ok()) {
    if (match.status().code() == StatusCode::kInvalidArgument)
      return error(400, match.status().message());
    return fail(match.status());
  }
  if (Status st = revoke_token(store_, *match); !st.ok()) {
    if (st.code() == StatusCode::kFailedPrecondition) return error(409, st.message());
    return fail(st);
  }
  if (token_revoked_) token_revoked_(match->hash);
  return json_response(200, json::object{{"revoked", match->hash}, {"role", match->role}});
}

}  // namespace atl::coordinator::http
