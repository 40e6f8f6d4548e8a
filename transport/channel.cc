#include "transport/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/channel_arguments.h>

#include "transport/grpc_status.h"

namespace atl::transport {

void apply_server_limits(grpc::ServerBuilder& builder, const ServerLimits& limits) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(limits.handshake_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(limits.max_connection_idle.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  grpc::ResourceQuota quota("atoll-server");
  quota.SetMaxThreads(limits.max_threads);
  builder.SetResourceQuota(quota);
}

std::shared_ptr<grpc::Channel> create_channel(const std::string& target, const ClientTls& tls) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  if (!tls.insecure && !tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(tls.server_name_override);
  }
  return grpc::CreateCustomChannel(target, tls.credentials, args);
}

namespace {
bool has(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}
}  // namespace

Status explain_call_error(const grpc::Status& status, const std::string& target,
                          const ClientTls& tls) {
  Status st = from_grpc(status);
  if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) return st;
  const std::string& m = status.error_message();
  const std::string head = "cannot connect to " + target + ": ";
  const std::string name = tls.server_name_override.empty() ? target : tls.server_name_override;
  if (has(m, "Connection refused")) {
    return Unavailable(head + "nothing is listening there (is the coordinator running?)");
  }
  if (tls.insecure) {
    if (has(m, "Socket closed") || has(m, "Connection reset")) {
      return Unavailable(head +
                         "the coordinator closed the connection; it probably requires TLS "
                         "(drop --insecure and pass --tls DIR)");
    }
    return Unavailable(head + m);
  }
  if (has(m, "certificate verify failed")) {
    return Unavailable(head +
                       "the coordinator's certificate was not issued by this experiment's CA "
                       "(ca.crt in the TLS directory), or it has expired");
  }
  if (has(m, "is not in peer certificate")) {
    return Unavailable(head + "the coordinator's certificate is not valid for the name '" + name +
                       "': use the name it was issued for (--server-name) or issue a server "
                       "certificate with that name");
  }
  if (has(m, "Socket closed") || has(m, "Connection reset") || has(m, "Handshake")) {
    return Unavailable(head +
                       "the coordinator refused the TLS handshake: it does not accept this "
                       "node's certificate (issued by another CA, expired or revoked) or it is "
                       "not running with TLS");
  }
  return Unavailable(head + m);
}

}  // namespace atl::transport
