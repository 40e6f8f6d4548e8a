#include "transport/channel.h"

#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/channel_arguments.h>
#include <netdb.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "transport/grpc_status.h"
#include "transport/host_port.h"
#include "transport/tls/handshake_probe.h"

namespace atl::transport {

void apply_server_limits(grpc::ServerBuilder& builder, const ServerLimits& limits) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(limits.handshake_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(limits.max_connection_idle.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  // Nodes ping their control connection every kKeepaliveTimeMs, also while only a long-poll is
  // open: allowed, where gRPC's default (one ping per 5 minutes without data) would answer
  // them with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  grpc::ResourceQuota quota("atoll-server");
  quota.SetMaxThreads(limits.max_threads);
  builder.SetResourceQuota(quota);
}

void apply_exclusive_port(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

namespace {

// The errno of binding `address` (from getaddrinfo) the way gRPC does (SO_REUSEADDR, so that
// connections still in TIME_WAIT do not count); 0 when the bind succeeds.
int bind_errno(const addrinfo& address) {
  const int fd = ::socket(address.ai_family, address.ai_socktype, address.ai_protocol);
  if (fd < 0) return errno;
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int err = ::bind(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

Status check_can_listen(const std::string& listen, const std::string& flag) {
  ATOLL_ASSIGN_OR_RETURN(const HostPort hp, parse_host_port(listen, flag));
  const std::string& host = hp.host;
  const std::string port = std::to_string(hp.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr)
    return InvalidArgument(flag + " " + listen + ": '" + host +
                           "' is not an address or a known host name of this machine");
  int err = 0;
  for (const addrinfo* a = found; a != nullptr && err == 0; a = a->ai_next) err = bind_errno(*a);
  ::freeaddrinfo(found);
  switch (err) {
    case EADDRINUSE:
      return Unavailable("port " + listen + " is already in use by another process; stop it or " +
                         "choose another " + flag);
    case EADDRNOTAVAIL:
      return Unavailable(listen + " is not an address of this machine; choose one of its " +
                         "addresses (or 0.0.0.0) for " + flag);
    case EACCES:
      return PermissionDenied("no permission to listen on " + listen +
                              " (ports below 1024 need privileges); choose another " + flag);
    case 0:
      return Status::Ok();
    default:
      return Unavailable("cannot listen on " + listen + ": " + std::strerror(err));
  }
}

std::shared_ptr<grpc::Channel> create_channel(const std::string& target, const ClientTls& tls,
                                              const std::string& connection) {
  grpc::ChannelArguments args;
  if (!connection.empty()) {
    // An argument of its own keys a subchannel of its own; the local pool keeps it from being
    // shared with another channel's.
    args.SetString("atoll.connection", connection);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectInitialBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxBackoffMs);
  if (connection.empty()) {
    // The control connection (heartbeats, long-polls, Join) carries little data, so a ping's
    // answer is not queued behind megabytes: one unanswered for kKeepaliveTimeoutMs means the
    // connection is dead (the node's address changed, the link went down), and calls reconnect
    // instead of waiting on it until their deadlines. Stream connections are not pinged (an
    // answer may wait behind θ on a slow link); their calls have a stall timeout instead.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (!tls.insecure && !tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(tls.server_name_override);
  }
  return grpc::CreateCustomChannel(target, tls.credentials, args);
}

bool wait_until_connected(grpc::Channel& channel,
                          std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && channel.WaitForStateChange(state, deadline))
    state = channel.GetState(/*try_to_connect=*/true);
  return state == GRPC_CHANNEL_READY;
}

namespace {

bool has(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}

constexpr char kConnectFailure[] = "failed to connect to all addresses";

// What gRPC says went wrong, without its framing: "Connection refused" out of "failed to connect
// to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7070: Failed to connect to remote host:
// Connection refused".
std::string last_error_text(const std::string& m) {
  std::string t = m;
  if (const size_t last = t.find("last error: "); last != std::string::npos)
    t = t.substr(last + 12);
  for (const char* status : {"UNKNOWN: ", "UNAVAILABLE: ", "INTERNAL: "})
    if (t.rfind(status, 0) == 0) t = t.substr(std::string(status).size());
  for (const char* scheme : {"ipv4:", "ipv6:", "unix:"}) {
    if (t.rfind(scheme, 0) != 0) continue;
    // "ipv4:HOST:PORT: what" (IPv6 hosts are bracketed): the text after the address.
    const size_t end = t.find(": ", t.find(':', std::string(scheme).size()) + 1);
    if (end != std::string::npos) t = t.substr(end + 2);
  }
  for (const char* wrapper : {"Failed to connect to remote host: ", "recvmsg:", "sendmsg:"})
    if (t.rfind(wrapper, 0) == 0) t = t.substr(std::string(wrapper).size());
  return t.substr(0, 200);
}

}  // namespace

LinkFailure classify_link_failure(const grpc::Status& status) {
  if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE)
    return LinkFailure::kNone;
  const std::string& m = status.error_message();
  const bool connecting = has(m, kConnectFailure);
  const bool cut = has(m, "Socket closed") || has(m, "Connection reset") || has(m, "Broken pipe") ||
                   has(m, "Handshake read failed") || has(m, "Handshake write failed") ||
                   has(m, "unexpected eof") || has(m, "End of TCP stream");
  if (!connecting) {
    if (cut || has(m, "GOAWAY") || has(m, "Connection lost") || has(m, "keepalive"))
      return LinkFailure::kLost;
    return LinkFailure::kNone;
  }
  if (has(m, "Connection refused")) return LinkFailure::kRefused;
  if (has(m, "certificate verify failed")) return LinkFailure::kServerCertificate;
  if (has(m, "is not in peer certificate")) return LinkFailure::kServerName;
  if (has(m, "wrong version number") || has(m, "packet length too long") ||
      has(m, "http request") || has(m, "unknown protocol"))
    return LinkFailure::kNotTls;
  if (cut) return LinkFailure::kHandshakeCut;
  if (has(m, "timed out") || has(m, "Timeout") || has(m, "Deadline") || has(m, "No route") ||
      has(m, "unreachable") || has(m, "DNS") || has(m, "resolve") || has(m, "Name or service"))
    return LinkFailure::kUnreachable;
  return LinkFailure::kOther;
}

Status explain_call_error(const grpc::Status& status, const std::string& target,
                          const ClientTls& tls, const std::string& named) {
  const std::string who = named.empty() ? target : named;
  const std::string& m = status.error_message();
  const std::string what = last_error_text(m);
  const std::string name = tls.server_name_override.empty() ? target : tls.server_name_override;
  switch (classify_link_failure(status)) {
    case LinkFailure::kNone: {
      const Status st = from_grpc(status);
      if (st.ok()) return st;
      return Status(st.code(), who + ": " +
                                   (st.message().empty() ? describe_status_code(status.error_code())
                                                         : st.message()));
    }
    case LinkFailure::kRefused:
      return Unavailable(who + " not reachable (connection refused)");
    case LinkFailure::kUnreachable:
    case LinkFailure::kOther:
      return Unavailable(who + " not reachable (" + what + ")");
    case LinkFailure::kLost:
      return Unavailable("connection to " + who + " lost (" + what + ")");
    case LinkFailure::kHandshakeCut:
      if (tls.insecure)
        return Unavailable(who + " closed the connection before answering (" + what +
                           "); it probably requires TLS (drop --insecure and pass --tls DIR)");
      return Unavailable(
          who + " not reachable (the connection was cut during the TLS handshake: " + what +
          "; a coordinator at its connection cap closes new connections so, and "
          "says so in its log)");
    case LinkFailure::kServerCertificate:
      return Unauthenticated(who + " presents a certificate this node does not accept: it was " +
                             "not issued by this experiment's CA (ca.crt in the TLS directory), " +
                             "or it has expired");
    case LinkFailure::kServerName:
      return Unauthenticated(who + " presents a certificate that is not valid for the name '" +
                             name + "': use the name it was issued for (" + tls.name_flag +
                             ") or issue a server certificate with that name");
    case LinkFailure::kNotTls:
      return Unavailable(who + " does not answer in TLS (" + what +
                         "); is it running with --insecure?");
  }
  return Unavailable(who + " not reachable (" + what + ")");
}

namespace {

// Two probes a moment apart must agree before a hang-up after the handshake counts as a refusal
// of this client's certificate: a server killed in that instant looks the same once.
constexpr std::chrono::milliseconds kProbeTimeout{3000};
constexpr std::chrono::milliseconds kProbeRepeatAfter{200};

// What to do about the server certificate OpenSSL refused with `x509_error` (X509_V_ERR_*).
std::string server_certificate_fix(long x509_error) {
  switch (x509_error) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "issue the server a new certificate with `atoll ca issue --role server` where the "
             "experiment's CA (ca.key) is kept, and copy it into the server's TLS directory";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "check the clocks of both machines";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return "it was not issued by this experiment's CA (ca.crt in the TLS directory): copy the "
             "experiment's ca.crt there, or point the node at the right server";
    default:
      return "it must be issued by this experiment's CA (ca.crt in the TLS directory) and be "
             "valid now";
  }
}

}  // namespace

Status explain_connect_failure(const grpc::Status& status, const std::string& target,
                               const ClientTls& tls, const std::string& named) {
  Status explained = explain_call_error(status, target, tls, named);
  const LinkFailure kind = classify_link_failure(status);
  if (tls.insecure || !tls.identity ||
      (kind != LinkFailure::kHandshakeCut && kind != LinkFailure::kServerCertificate))
    return explained;
  const std::string who = named.empty() ? target : named;
  ProbeResult probe = probe_tls_handshake(target, *tls.identity, kProbeTimeout);
  if (probe.outcome == ProbeOutcome::kServerCertificateRefused)
    return Unauthenticated(who + " presents a certificate this node does not accept (" +
                           probe.detail + "): " + server_certificate_fix(probe.x509_error));
  if (kind != LinkFailure::kHandshakeCut) return explained;
  if (probe.outcome == ProbeOutcome::kClientCertificateRefused) {
    std::this_thread::sleep_for(kProbeRepeatAfter);
    probe = probe_tls_handshake(target, *tls.identity, kProbeTimeout);
    if (probe.outcome == ProbeOutcome::kClientCertificateRefused)
      return Unauthenticated(who + " does not accept this node's certificate (" + probe.detail +
                             "): it was not issued by the server's CA, has expired or was " +
                             "revoked (the server's log names which); issue a new one " +
                             "with `atoll ca issue` where the experiment's CA (ca.key) is kept, "
                             "and copy it into this node's TLS directory");
  }
  if (probe.outcome == ProbeOutcome::kNotTls)
    return Unavailable(who + " does not answer in TLS (" + probe.detail +
                       "); is it running with --insecure?");
  return explained;
}

}  // namespace atl::transport
