// Why the coordinator refused a connection, as one line an operator can act on.
//
// gRPC refuses a bad client inside the TLS handshake (OpenSSL verifies the client certificate
// against the experiment's CA) and reports it only as a generic log line such as
//   "Handshake failed with fatal error SSL_ERROR_SSL: error:0A000086:SSL routines::certificate
//    verify failed."
// HandshakeRefusalLog routes gRPC's log through explain_handshake_failure, so each refused
// connection becomes one "refused a connection: <reason and fix>" line instead. Why a log hook
// and not a certificate verifier: docs/decisions.md, "Refused connections: gRPC's log,
// classified".
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace atl::transport {

// One line for a gRPC log message that reports a refused TLS handshake; nullopt for any other
// message. Pure (a function of the text), so every reason is unit-tested.
std::optional<std::string> explain_handshake_failure(std::string_view grpc_message);

// While alive, gRPC's log messages go through explain_handshake_failure: a refused handshake
// becomes its one line, given to `sink` (default: a line on stderr); gRPC's repeats of it are
// dropped; every other message goes to stderr in gRPC's own layout if GRPC_VERBOSITY asks for
// it. (gRPC's verbosity is set to debug, because a client hanging up mid-handshake is logged only
// there; the filtering by GRPC_VERBOSITY happens here instead.) gRPC has one log function per
// process, so the newest instance receives the lines and its destructor puts back a plain
// pass-through; create one per process (the coordinator's command does) or per test.
class HandshakeRefusalLog {
 public:
  using Sink = std::function<void(const std::string& line)>;
  explicit HandshakeRefusalLog(Sink sink = {});
  ~HandshakeRefusalLog();
  HandshakeRefusalLog(const HandshakeRefusalLog&) = delete;
  HandshakeRefusalLog& operator=(const HandshakeRefusalLog&) = delete;

 private:
  Sink sink_;
};

// While alive, gRPC's own log messages (all but HandshakeRefusalLog's refusals) go to `sink`
// as "grpc: file:line] message" with `error` = gRPC's ERROR severity, instead of to stderr in
// gRPC's layout, which broke `--log-format json` ("every log line is a JSON object") and the
// one line per error: the process's logger formats them. What GRPC_VERBOSITY asks for passes
// (gRPC's default: errors only). A client's failed TLS handshake ("Handshake failed with fatal
// error ...") is dropped unless GRPC_VERBOSITY is DEBUG: the call that failed says why in its
// own line (transport/channel.h, explain_connect_failure). One per process (`atoll node`,
// `atoll coordinator`); the destructor puts back gRPC's layout on stderr.
class GrpcLogRoute {
 public:
  using Sink = std::function<void(bool error, const std::string& line)>;
  explicit GrpcLogRoute(Sink sink);
  ~GrpcLogRoute();
  GrpcLogRoute(const GrpcLogRoute&) = delete;
  GrpcLogRoute& operator=(const GrpcLogRoute&) = delete;

 private:
  Sink sink_;
};

}  // namespace atl::transport
