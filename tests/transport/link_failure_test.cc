// Why a call could not reach its server, as a node reports it: gRPC's messages classified, a TLS
// handshake cut by a peer that hangs up (no verdict: a transport error, retried), and the
// explanations of a port that cannot be listened on.
#include <arpa/inet.h>
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/transport/cutting_server.h"
#include "transport/channel.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "tools/temp_dir.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"
#include "transport/tls/handshake_probe.h"

namespace atl::transport {
namespace {

using atl::testing::TempDir;
namespace pb = atoll_pb::v1;

grpc::Status unavailable(const std::string& m) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, m);
}

// gRPC 1.51's messages, as seen from `atoll node`.
TEST(LinkFailure, ClassifiesGrpcMessages) {
  const std::string connect = "failed to connect to all addresses; last error: ";
  EXPECT_EQ(classify_link_failure(unavailable(
                connect + "UNKNOWN: ipv4:127.0.0.1:7443: Failed to connect to remote host: "
                          "Connection refused")),
            LinkFailure::kRefused);
  EXPECT_EQ(classify_link_failure(
                unavailable(connect + "UNAVAILABLE: ipv4:127.0.0.1:7443: Socket closed")),
            LinkFailure::kHandshakeCut);
  EXPECT_EQ(classify_link_failure(unavailable(
                connect + "UNAVAILABLE: ipv4:127.0.0.1:7443: recvmsg:Connection reset by peer")),
            LinkFailure::kHandshakeCut);
  EXPECT_EQ(classify_link_failure(unavailable(
                connect + "UNKNOWN: ipv4:127.0.0.1:7443: Ssl handshake failed: SSL_ERROR_SSL: "
                          "error:0A000086:SSL routines::certificate verify failed")),
            LinkFailure::kServerCertificate);
  EXPECT_EQ(classify_link_failure(unavailable(
                connect + "UNKNOWN: ipv4:127.0.0.1:7443: Peer name x is not in peer certificate")),
            LinkFailure::kServerName);
  EXPECT_EQ(classify_link_failure(unavailable(
                connect + "UNKNOWN: ipv4:10.0.0.9:7443: Failed to connect to remote host: "
                          "Connection timed out")),
            LinkFailure::kUnreachable);
  // An established connection that broke, and the server's own UNAVAILABLE.
  EXPECT_EQ(classify_link_failure(unavailable("Socket closed")), LinkFailure::kLost);
  EXPECT_EQ(classify_link_failure(unavailable("recvmsg:Connection reset by peer")),
            LinkFailure::kLost);
  EXPECT_EQ(classify_link_failure(unavailable("coordinator is shutting down; reconnect later")),
            LinkFailure::kNone);
  EXPECT_EQ(classify_link_failure(grpc::Status(grpc::StatusCode::DATA_LOSS, "Socket closed")),
            LinkFailure::kNone);
  EXPECT_TRUE(is_certificate_verdict(LinkFailure::kServerCertificate));
  EXPECT_FALSE(is_certificate_verdict(LinkFailure::kHandshakeCut));

  // Verdicts are kUnauthenticated (not retried), everything else kUnavailable.
  ClientTls tls;
  const Status cut =
      explain_call_error(unavailable(connect + "UNAVAILABLE: ipv4:127.0.0.1:7443: Socket closed"),
                         "127.0.0.1:7443", tls, "coordinator at 127.0.0.1:7443");
  EXPECT_EQ(cut.code(), StatusCode::kUnavailable);
  EXPECT_EQ(cut.message(),
            "coordinator at 127.0.0.1:7443 not reachable (the connection was cut during the TLS "
            "handshake: Socket closed; a coordinator at its connection cap closes new connections "
            "so, and says so in its log)");
  const Status lost = explain_call_error(unavailable("Socket closed"), "127.0.0.1:7443", tls,
                                         "coordinator at 127.0.0.1:7443");
  EXPECT_EQ(lost.message(), "connection to coordinator at 127.0.0.1:7443 lost (Socket closed)");
  const Status verdict = explain_call_error(
      unavailable(connect + "UNKNOWN: ipv4:127.0.0.1:7443: Ssl handshake failed: SSL_ERROR_SSL: "
                            "error:0A000086:SSL routines::certificate verify failed"),
      "127.0.0.1:7443", tls);
  EXPECT_EQ(verdict.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(verdict.message().rfind("127.0.0.1:7443 presents a certificate", 0), 0u)
      << verdict.message();
}

// The flag that sets the expected name is the caller's (ClientTls::name_flag), and a server's
// answer without a message says what its code means instead of ending in an empty text.
TEST(LinkFailure, ExplanationsNameTheFlagAndAnEmptyAnswersCode) {
  const std::string connect = "failed to connect to all addresses; last error: ";
  const grpc::Status wrong_name = unavailable(
      connect + "UNKNOWN: ipv4:127.0.0.1:7443: Peer name teacher is not in peer certificate");
  ClientTls tls;
  tls.server_name_override = "teacher";
  EXPECT_NE(
      explain_call_error(wrong_name, "127.0.0.1:7443", tls)
          .message()
          .find("not valid for the name 'teacher': use the name it was issued for (--server-name)"),
      std::string::npos);
  tls.name_flag = "--teacher-name";
  const Status named =
      explain_call_error(wrong_name, "127.0.0.1:7443", tls, "teacher 127.0.0.1:7443");
  EXPECT_EQ(named.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(named.message().find("use the name it was issued for (--teacher-name)"),
            std::string::npos)
      << named.message();
  EXPECT_EQ(named.message().find("--server-name"), std::string::npos) << named.message();

  const Status empty = explain_call_error(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""),
                                          "127.0.0.1:7443", tls, "coordinator at 127.0.0.1:7443");
  EXPECT_EQ(empty.message(),
            "coordinator at 127.0.0.1:7443: UNIMPLEMENTED: the server does not serve this call");
  const Status said = explain_call_error(grpc::Status(grpc::StatusCode::NOT_FOUND, "no round 3"),
                                         "127.0.0.1:7443", tls, "coordinator at 127.0.0.1:7443");
  EXPECT_EQ(said.message(), "coordinator at 127.0.0.1:7443: no round 3");
}

TEST(LinkFailure, CutHandshakeIsATransportErrorNotAVerdict) {
  TempDir dir;
  const std::string ca = dir.sub("ca");
  ASSERT_TRUE(ca_init(ca).ok());
  ASSERT_TRUE(ca_issue(ca, "node-1", Role::kNode).ok());
  auto tls = client_credentials(ca, "node-1", "coordinator");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  atl::testing::CuttingServer cutter;
  ASSERT_TRUE(cutter.listening());

  auto stub = pb::Coordinator::NewStub(create_channel(cutter.target(), *tls));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::JoinResponse resp;
  const grpc::Status st = stub->Join(&ctx, pb::JoinRequest(), &resp);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_EQ(classify_link_failure(st), LinkFailure::kHandshakeCut) << st.error_message();

  const ProbeResult probe =
      probe_tls_handshake(cutter.target(), *tls->identity, std::chrono::seconds(5));
  EXPECT_EQ(probe.outcome, ProbeOutcome::kCut) << probe.detail;

  const Status explained =
      explain_connect_failure(st, cutter.target(), *tls, "coordinator at " + cutter.target());
  EXPECT_EQ(explained.code(), StatusCode::kUnavailable) << explained.message();
  EXPECT_NE(explained.message().find("cut during the TLS handshake"), std::string::npos)
      << explained.message();
  EXPECT_EQ(explained.message().find("certificate"), std::string::npos) << explained.message();
  EXPECT_GE(cutter.accepted(), 2);  // gRPC's attempt and the probe's
}

TEST(CheckCanListen, NamesThePortAndTheFix) {
  // A port held by a plain listening socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string held = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const Status in_use = check_can_listen(held, "--http");
  EXPECT_EQ(in_use.code(), StatusCode::kUnavailable);
  EXPECT_EQ(in_use.message(), "port " + held +
                                  " is already in use by another process; stop it or choose "
                                  "another --http");
  ::close(fd);
  EXPECT_TRUE(check_can_listen(held, "--http").ok());
  EXPECT_TRUE(check_can_listen("127.0.0.1:0", "--listen").ok());
  // 192.0.2.0/24 is reserved for documentation (RFC 5737): no machine has it.
  const Status foreign = check_can_listen("192.0.2.1:7070", "--listen");
  EXPECT_NE(foreign.message().find("192.0.2.1:7070 is not an address of this machine"),
            std::string::npos)
      << foreign.message();
}

}  // namespace
}  // namespace atl::transport
