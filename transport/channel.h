// Channel and server settings shared by every Atoll endpoint: message size bounds and the
// TLS name override.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

#include "transport/tensor_stream.h"
#include "transport/tls/credentials.h"

namespace atl::transport {

// Largest serialized message either side accepts or sends: one full TensorChunk (1 MiB of
// data) plus its header and framing. Everything else in the protocol is far smaller.
inline constexpr int kMaxMessageBytes = static_cast<int>(kMaxChunkBytes) + (64 << 10);

// What one server lets its clients hold. gRPC 1.51 (Debian 12) has no cap on accepted
// connections (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS came in a later release); what it bounds
// instead: a connection that has not finished its TLS handshake is closed after
// handshake_timeout (so unauthenticated clients hold a socket for at most that long), an
// authenticated connection with no call in flight is closed after max_connection_idle (clients
// reconnect transparently), each connection carries at most max_concurrent_streams calls, and
// the server runs at most max_threads handler threads (further calls get RESOURCE_EXHAUSTED).
struct ServerLimits {
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds max_connection_idle{300000};
  int max_concurrent_streams = 256;
  int max_threads = 1024;
};

// Applies the message bounds and `limits` to a server under construction.
void apply_server_limits(grpc::ServerBuilder& builder, const ServerLimits& limits = {});

// A channel to `target` ("host:port") with the message bounds and, when set, the TLS server
// name override. Does not connect yet (gRPC connects lazily).
std::shared_ptr<grpc::Channel> create_channel(const std::string& target, const ClientTls& tls);

// Turns a failed call's status into one line a user can act on. Connection failures (gRPC's
// "failed to connect to all addresses; last error: ...") are recognised and explained: the
// coordinator's certificate is from another CA or lacks the expected name, the coordinator
// closed the handshake (it does not accept this node's certificate, or expects plaintext/TLS),
// or nothing listens at the target. Everything else keeps its code and message.
Status explain_call_error(const grpc::Status& status, const std::string& target,
                          const ClientTls& tls);

}  // namespace atl::transport
