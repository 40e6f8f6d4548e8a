#include "transport/tls/handshake_log.h"

#include <grpc/support/log.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace atl::transport {
namespace {

bool has(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// OpenSSL's reason, e.g. "certificate verify failed" out of
// "... error:0A000086:SSL routines::certificate verify failed." ("" when absent).
std::string openssl_reason(std::string_view m) {
  const size_t routines = m.find("routines:");
  if (routines == std::string_view::npos) return "";
  size_t b = m.find(':', routines + 9);
  b = b == std::string_view::npos ? routines + 9 : b + 1;
  std::string_view r = m.substr(b);
  r = r.substr(0, r.find_first_of("{\n"));
  while (!r.empty() && (r.back() == '.' || r.back() == ' ')) r.remove_suffix(1);
  return std::string(r);
}

// "127.0.0.1:53426" out of `target_address:"ipv4:127.0.0.1:53426"` ("" when absent).
std::string peer_address(std::string_view m) {
  constexpr std::string_view kKey = "target_address:\"";
  const size_t k = m.find(kKey);
  if (k == std::string_view::npos) return "";
  std::string_view a = m.substr(k + kKey.size());
  a = a.substr(0, a.find('"'));
  for (std::string_view scheme : {"ipv4:", "ipv6:"})
    if (a.substr(0, scheme.size()) == scheme) a.remove_prefix(scheme.size());
  return std::string(a.substr(0, 100));
}

// The name a client asked for in its TLS SNI, out of gRPC's "No match found for server name:
// coord.example.org." (the last '.' is gRPC's). It comes from the network: printable ASCII only,
// at most 100 characters.
std::string requested_server_name(std::string_view m) {
  constexpr std::string_view kKey = "No match found for server name: ";
  std::string_view n = m.substr(m.find(kKey) + kKey.size());
  n = n.substr(0, n.find('\n'));
  if (!n.empty() && n.back() == '.') n.remove_suffix(1);
  std::string out;
  for (char c : n.substr(0, 100)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return out;
}

// gRPC repeats a handshake failure at debug level (security_handshaker.cc, chttp2_server.cc);
// the line explain_handshake_failure made from the first one says it all.
bool repeats_a_handshake_failure(std::string_view m) {
  return has(m, "Handshaking failed:") ||
         (has(m, "Security handshake failed:") && has(m, "Ssl handshake failed"));
}

const char* severity_letter(gpr_log_severity s) {
  switch (s) {
    case GPR_LOG_SEVERITY_DEBUG:
      return "D";
    case GPR_LOG_SEVERITY_INFO:
      return "I";
    default:
      return "E";
  }
}

// What GRPC_VERBOSITY asks for (gRPC's default: errors only). kNothing for NONE.
constexpr int kNothing = GPR_LOG_SEVERITY_ERROR + 1;
int configured_min_severity() {
  const char* v = std::getenv("GRPC_VERBOSITY");
  std::string s = v == nullptr ? "" : v;
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s == "DEBUG") return GPR_LOG_SEVERITY_DEBUG;
  if (s == "INFO") return GPR_LOG_SEVERITY_INFO;
  if (s == "NONE") return kNothing;
  return GPR_LOG_SEVERITY_ERROR;
}

// gRPC's own layout, minus the timestamp and thread id: "E file:line] message".
void print(gpr_log_func_args* args) {
  std::fprintf(stderr, "%s %s:%d] %s\n", severity_letter(args->severity), args->file, args->line,
               args->message);
  std::fflush(stderr);
}

// gRPC's log hook is a plain function pointer with no user data: the instance that installed
// it and the verbosity asked for are found here.
std::mutex g_mu;
const HandshakeRefusalLog::Sink* g_sink = nullptr;
const GrpcLogRoute::Sink* g_route = nullptr;
int g_min_severity = GPR_LOG_SEVERITY_ERROR;

void pass_through(gpr_log_func_args* args) {
  if (static_cast<int>(args->severity) < g_min_severity) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_route == nullptr || !*g_route) return print(args);
  (*g_route)(
      args->severity == GPR_LOG_SEVERITY_ERROR,
      "grpc: " + std::string(args->file) + ":" + std::to_string(args->line) + "] " + args->message);
}

// A client's process (no HandshakeRefusalLog): its failed handshakes are explained by the call
// that failed.
void route_client(gpr_log_func_args* args) {
  if (g_min_severity > GPR_LOG_SEVERITY_DEBUG && explain_handshake_failure(args->message)) return;
  pass_through(args);
}

// Clients that hang up or stall mid-handshake, said at most once per kRefusalRepeatS per kind
// (the line without the client's address), the next line counting those left out: a port
// probe, a scanner or a flood gave one line per connection (12 a minute from a Kubernetes TCP
// probe). Certificate verdicts stay one line each. Under g_mu.
constexpr double kRefusalRepeatS = 10;
struct RefusalsOfAKind {
  std::chrono::steady_clock::time_point said;
  uint64_t unsaid = 0;
};
std::map<std::string, RefusalsOfAKind> g_refusals;

// The line to print for `line` now, or nullopt while its kind was said less than
// kRefusalRepeatS ago.
std::optional<std::string> rate_limited(const std::string& line) {
  if (line.find("the client hung up during the TLS handshake") == std::string::npos &&
      line.find("did not complete the TLS handshake in time") == std::string::npos)
    return line;
  const size_t colon = line.find(": ");
  const std::string kind = colon == std::string::npos ? line : line.substr(colon + 2);
  const auto now = std::chrono::steady_clock::now();
  auto [it, first] = g_refusals.try_emplace(kind);
  RefusalsOfAKind& r = it->second;
  if (!first && std::chrono::duration<double>(now - r.said).count() < kRefusalRepeatS) {
    ++r.unsaid;
    return std::nullopt;
  }
  std::string out = line;
  if (r.unsaid > 0)
    out += " (" + std::to_string(r.unsaid) + " more like it since this was last said)";
  r.said = now;
  r.unsaid = 0;
  if (g_refusals.size() > 64) g_refusals.clear();  // kinds are few; names in lines are not
  return out;
}

void classify(gpr_log_func_args* args) {
  if (auto explained = explain_handshake_failure(args->message)) {
    std::lock_guard<std::mutex> lock(g_mu);
    const std::optional<std::string> line = rate_limited(*explained);
    if (!line) return;
    if (g_sink != nullptr && *g_sink) {
      (*g_sink)(*line);
    } else {
      std::fprintf(stderr, "%s\n", line->c_str());
      std::fflush(stderr);
    }
    return;
  }
  if (repeats_a_handshake_failure(args->message) && g_min_severity > GPR_LOG_SEVERITY_DEBUG) return;
  pass_through(args);
}

}  // namespace

std::optional<std::string> explain_handshake_failure(std::string_view m) {
  const std::string head = "refused a connection: ";
  // The client went away mid-handshake (gRPC says so only at debug level, with its address):
  // an Atoll node does that when the coordinator's certificate does not verify against its
  // ca.crt. A TLS failure of our own is reported by the line below, not this one.
  if (has(m, "Security handshake failed:") && !has(m, "Ssl handshake failed")) {
    const std::string peer = peer_address(m);
    const std::string from = peer.empty() ? head : "refused a connection from " + peer + ": ";
    if (has(m, "Socket closed") || has(m, "Connection reset") || has(m, "Broken pipe"))
      return from +
             "the client hung up during the TLS handshake: a node does when it does not trust "
             "this coordinator's certificate (its ca.crt is from another experiment: give it "
             "this experiment's ca.crt); port probes and scanners do too";
    if (has(m, "timed out") || has(m, "Deadline") || has(m, "deadline"))
      return from + "the client did not complete the TLS handshake in time";
    return std::nullopt;  // e.g. shutdown: not a refusal
  }
  // The client's SNI (a node's --server-name) is none of the server certificate's names: OpenSSL
  // goes on with that certificate and the client refuses it after the handshake, without an
  // alert, so this line of gRPC's (at error level) is all the coordinator sees of it.
  if (has(m, "No match found for server name: ")) {
    const std::string name = requested_server_name(m);
    return "a client asked for this coordinator by the name '" + name +
           "', which its certificate does not hold, and will refuse it: start the node with "
           "--server-name set to a name of the certificate (`atoll ca show --cert` lists them), "
           "or issue the server a certificate with --san " +
           name;
  }
  // gRPC's TSI layer logs exactly one of these per failed handshake (ssl_transport_security.cc).
  if (!has(m, "Handshake failed with fatal error")) return std::nullopt;
  // The client's certificate: OpenSSL checked it against ca.crt and it did not verify. gRPC
  // keeps neither OpenSSL's detail nor the certificate, so expired and foreign are one case here;
  // the node says which (it checks its own certificate before connecting).
  if (has(m, "certificate verify failed"))
    return head +
           "the client's certificate was not issued by this experiment's CA, or it has expired "
           "or is not yet valid (the node's log names which); issue it a new one with `atoll ca "
           "issue --dir CA_DIR --name NAME --role node` where this experiment's CA (ca.key) is "
           "kept, and copy NAME.crt and NAME.key into the node's TLS directory";
  if (has(m, "peer did not return a certificate"))
    return head +
           "the client presented no certificate (mutual TLS is required); start the node with "
           "--tls DIR holding its certificate from `atoll ca issue`";
  // Plaintext HTTP/2 (or HTTP/1) bytes where a TLS record was expected.
  if (has(m, "wrong version number") || has(m, "http request") ||
      has(m, "packet length too long") || has(m, "record layer failure") ||
      has(m, "unknown protocol"))
    return head +
           "a plaintext client (no TLS): this coordinator requires TLS 1.3 with a client "
           "certificate; start the node with --tls DIR instead of --insecure";
  if (has(m, "unsupported protocol") || has(m, "no protocols available") ||
      has(m, "version too low"))
    return head +
           "the client offered only TLS versions older than 1.3; this coordinator speaks TLS 1.3 "
           "only";
  // The client hung up with an alert about our certificate.
  if (has(m, "alert unknown ca") || has(m, "alert bad certificate") ||
      has(m, "alert certificate unknown"))
    return head +
           "the client does not trust this coordinator's certificate (its ca.crt is from another "
           "experiment); give the node this experiment's ca.crt";
  if (has(m, "alert certificate expired"))
    return head + "the client says this coordinator's certificate has expired; issue a new one";
  const std::string reason = openssl_reason(m);
  return head + "TLS handshake failed (" + (reason.empty() ? std::string(m) : reason) + ")";
}

HandshakeRefusalLog::HandshakeRefusalLog(Sink sink) : sink_(std::move(sink)) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sink = &sink_;
    g_min_severity = configured_min_severity();
  }
  gpr_set_log_function(classify);
  // A client that hangs up mid-handshake is reported only at debug level; classify() passes
  // on just what GRPC_VERBOSITY asked for.
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
}

GrpcLogRoute::GrpcLogRoute(Sink sink) : sink_(std::move(sink)) {
  bool refusals_installed = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_route = &sink_;
    refusals_installed = g_sink != nullptr;
    if (!refusals_installed) g_min_severity = configured_min_severity();
  }
  // With a HandshakeRefusalLog, classify() stays installed and passes the rest on to the route.
  if (!refusals_installed) gpr_set_log_function(route_client);
}

GrpcLogRoute::~GrpcLogRoute() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_route == &sink_) g_route = nullptr;
}

HandshakeRefusalLog::~HandshakeRefusalLog() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink == &sink_) {
    gpr_set_log_function(pass_through);
    g_sink = nullptr;
  }
}

}  // namespace atl::transport
