#include "transport/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

namespace atl::transport {

void apply_server_limits(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
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

}  // namespace atl::transport
