// Channel and server settings shared by every Atoll endpoint: message size bounds, exclusive
// listening ports, reconnect backoff, the TLS name override, and one-line explanations of
// connection and listening failures.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

#include "transport/connection_table.h"
#include "transport/tensor_stream.h"
#include "transport/tls/credentials.h"

namespace atl::transport {

// Largest serialized message either side accepts or sends: one full TensorChunk (1 MiB of
// data) plus its header and framing. Everything else in the protocol is far smaller.
inline constexpr int kMaxMessageBytes = static_cast<int>(kMaxChunkBytes) + (64 << 10);

// What one server lets its clients hold. gRPC 1.51 (Debian 12) has no cap on accepted
// connections (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS came in a later release): the
// coordinator caps them with a listener of its own (transport/capped_listener.h, `caps`). What
// gRPC bounds: a connection that has not finished its TLS handshake is closed after
// handshake_timeout (so unauthenticated clients hold a socket for at most that long), an
// authenticated connection with no call in flight is closed after max_connection_idle (clients
// reconnect transparently), each connection carries at most max_concurrent_streams calls, and
// the server runs at most max_threads handler threads (further calls get RESOURCE_EXHAUSTED).
struct ServerLimits {
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds max_connection_idle{300000};
  int max_concurrent_streams = 256;
  int max_threads = 1024;
  // Open connections in all and per client address (CappedListener; over a cap a new connection
  // is closed at once). Servers built with apply_server_limits alone do not use it.
  ConnectionCaps caps{.max_connections = 1024, .max_per_address = 128, .evict_idle = false};
};

// Applies the message bounds and `limits` to a server under construction.
void apply_server_limits(grpc::ServerBuilder& builder, const ServerLimits& limits = {});

// The server owns its port alone: gRPC's default SO_REUSEPORT lets a second process bind the same
// HOST:PORT and take half of the connections (two coordinators would each run the experiment
// with half of the nodes); without it the second BuildAndStart fails.
void apply_exclusive_port(grpc::ServerBuilder& builder);

// Whether a server can listen on `listen` ("HOST:PORT"), found by binding it with a plain socket
// the way gRPC does: OK, or one line such as "port 127.0.0.1:7443 is already in use by another
// process; stop it or choose another --listen" (also: not an address of this machine, no
// permission). `flag` names the option to change. Servers check before starting, so that the
// usual failure is this line alone, and again after gRPC failed to bind, to explain it.
Status check_can_listen(const std::string& listen, const std::string& flag);

// How long a channel waits before reconnecting after a failed attempt (ms): from the initial
// value, ×1.6 per failure with ±20% jitter (gRPC's own schedule), at most the max, back to the
// initial value once connected. gRPC's defaults (1 s growing to 120 s) were one of the two reasons
// nodes came back 16 s after a coordinator restarted in 0.5 s (docs/decisions.md, "Reconnects").
inline constexpr int kReconnectInitialBackoffMs = 100;
inline constexpr int kReconnectMaxBackoffMs = 1000;
// HTTP/2 keepalive of a client's control connection (create_channel without a `connection`):
// a ping every 20 s, the connection closed when one is not answered within 20 s.
inline constexpr int kKeepaliveTimeMs = 20000;
inline constexpr int kKeepaliveTimeoutMs = 20000;

// A channel to `target` ("host:port") with the message bounds, the reconnect backoff above and,
// when set, the TLS server name override. Does not connect yet (gRPC connects lazily).
// `connection`: channels with different names never share a connection (gRPC otherwise pools
// one per target and credentials), e.g. a node's θ and update streams apart from its heartbeats,
// which on a slow link would wait behind megabytes of θ in the same socket buffer.
std::shared_ptr<grpc::Channel> create_channel(const std::string& target, const ClientTls& tls,
                                              const std::string& connection = "");

// The pause before retrying a call that found its server unreachable, for a channel that is
// not connected: drives the channel's connection attempt (GetState(true), WaitForStateChange)
// and returns true as soon as it is connected, false when `deadline` passes first. A gRPC channel
// is otherwise polled only inside a call (or by gRPC's backup poller every 5 s), so an attempt
// to a restarted server would sit in its TLS handshake until the server's handshake timeout cut
// it (docs/decisions.md, "Reconnects").
bool wait_until_connected(grpc::Channel& channel, std::chrono::system_clock::time_point deadline);

// Why a call could not reach its server, read from gRPC's UNAVAILABLE message. gRPC 1.51 says
// "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7070: Failed to
// connect to remote host: Connection refused" when a connection attempt failed, and "Socket
// closed" or "recvmsg:Connection reset by peer" when an established connection broke.
enum class LinkFailure {
  kNone,               // not a connection failure (OK, or the server itself answered)
  kRefused,            // connection refused: nothing accepts connections on that port now
  kUnreachable,        // timed out, no route to the host, its name did not resolve
  kLost,               // an established connection was closed or reset
  kHandshakeCut,       // closed or reset before the TLS handshake completed: no verdict
  kServerCertificate,  // this side refused the server's certificate (other CA, expired)
  kServerName,         // the server's certificate is not valid for the expected name
  kNotTls,             // the server does not answer in TLS (or, in --insecure mode, in plaintext)
  kOther,              // another connection failure
};
LinkFailure classify_link_failure(const grpc::Status& status);

// A verdict on a certificate: retrying cannot help.
inline bool is_certificate_verdict(LinkFailure f) {
  return f == LinkFailure::kServerCertificate || f == LinkFailure::kServerName;
}

// Turns a failed call's status into one line a user can act on, naming the server `who` ("" =
// the target alone), e.g. "coordinator at 10.0.0.5:7070". Connection failures are explained from
// classify_link_failure: a certificate verdict is kUnauthenticated (e.g. "coordinator
// at 10.0.0.5:7070 presents a certificate this node does not accept: ..."), every transport error
// kUnavailable (e.g. "coordinator at 10.0.0.5:7070 not reachable (connection refused)"). Everything
// else keeps its code and message, after "<who>: ".
Status explain_call_error(const grpc::Status& status, const std::string& target,
                          const ClientTls& tls, const std::string& who = "");

// explain_call_error, and when gRPC's account is ambiguous, a handshake of our own
// (tls/handshake_probe.h) to find the verdict gRPC does not report: a cut TLS handshake becomes
// kUnauthenticated when the server refuses this client's certificate (seen on two probes in a
// row), and stays a transport error otherwise; a refused server certificate gets OpenSSL's
// reason. Blocking (at most a few seconds); for the rare failed connect, not for every call.
Status explain_connect_failure(const grpc::Status& status, const std::string& target,
                               const ClientTls& tls, const std::string& who = "");

}  // namespace atl::transport
