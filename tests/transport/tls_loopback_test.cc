// Real gRPC server, real TLS, loopback, ephemeral port.
#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "kernels/core/crc32c.h"
#include "kernels/core/file_io.h"
#include "kernels/core/sha256.h"
#include "tests/transport/test_cas.h"
#include "tools/temp_dir.h"
#include "transport/channel.h"
#include "transport/grpc_status.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/proto/atoll.pb.h"
#include "transport/stall_watchdog.h"
#include "transport/tensor_stream.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"
#include "transport/tls/handshake_log.h"
#include "transport/tls/handshake_probe.h"
#include "transport/tls/openssl_util.h"

namespace atl::transport {
namespace {

using atl::testing::TempDir;
namespace pb = atoll_pb::v1;

constexpr auto kRpcDeadline = std::chrono::seconds(10);
constexpr uint64_t kStallingRound = 999999;  // TestCoordinator::PullParams stops sending

std::string deterministic_payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  return s;
}

// Join echoes the caller's certificate identity; PullParams streams `round` KiB; PushUpdate
// assembles and validates what it receives.
class TestCoordinator final : public pb::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext* ctx, const pb::JoinRequest*,
                    pb::JoinResponse* resp) override {
    auto id = peer_identity(*ctx);
    if (!id.ok()) return to_grpc(id.status());
    resp->set_node_id(id->name);
    resp->set_experiment_id(id->role);  // test service only: echo the role here
    return grpc::Status::OK;
  }

  grpc::Status PullParams(grpc::ServerContext* ctx, const pb::PullParamsRequest* req,
                          grpc::ServerWriter<pb::TensorChunk>* writer) override {
    if (req->round() == kStallingRound) {  // one chunk, then nothing until the client cancels
      pb::TensorChunk first;
      first.mutable_header()->set_round(req->round());
      writer->Write(first);
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return grpc::Status::CANCELLED;
    }
    const std::string payload = deterministic_payload(req->round() * 1024);
    pb::TensorHeader header;
    header.set_round(req->round());
    header.set_codec("bytes");
    return to_grpc(for_each_chunk(header, payload, [&](const pb::TensorChunk& c) {
      return writer->Write(c) ? Status::Ok() : Unavailable("client went away");
    }));
  }

  grpc::Status PushUpdate(grpc::ServerContext*, grpc::ServerReader<pb::TensorChunk>* reader,
                          pb::PushUpdateResponse* resp) override {
    ChunkAssembler assembler(8u << 20);
    pb::TensorChunk chunk;
    while (reader->Read(&chunk)) {
      Status st = assembler.add(chunk);
      if (!st.ok()) return to_grpc(st);
    }
    Status st = assembler.finish();
    if (!st.ok()) return to_grpc(st);
    resp->set_accepted(true);
    const std::string& digest = assembler.header().payload_xxh3();
    resp->set_message(to_hex(reinterpret_cast<const uint8_t*>(digest.data()), digest.size()));
    return grpc::Status::OK;
  }
};

struct RunningServer {
  TestCoordinator service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  void start(const std::shared_ptr<grpc::ServerCredentials>& creds) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port);
    apply_server_limits(builder);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~RunningServer() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port); }
};

std::string read(const std::string& path) {
  auto s = atl::read_file(path);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : "";
}

// Builds client credentials straight from files, bypassing pre-validation: what a careless or
// hostile client could do.
ClientTls raw_client(const std::string& ca_file, const std::string& key_file,
                     const std::string& cert_file, const std::string& server_name) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read(ca_file);
  if (!key_file.empty()) o.pem_private_key = read(key_file);
  if (!cert_file.empty()) o.pem_cert_chain = read(cert_file);
  ClientTls tls;
  tls.credentials = grpc::SslCredentials(o);
  tls.server_name_override = server_name;
  if (!key_file.empty() && !cert_file.empty())
    tls.identity = std::make_shared<const ClientIdentity>(
        ClientIdentity{o.pem_root_certs, o.pem_cert_chain, o.pem_private_key});
  return tls;
}

class TlsLoopback : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    ca_ = tmp_->sub("ca");
    other_ = tmp_->sub("other-ca");
    ASSERT_NO_FATAL_FAILURE(testing::issue_test_cas(ca_, other_));
    IssueOptions expired;
    expired.validity_seconds = -24 * 3600;
    ASSERT_TRUE(ca_issue(ca_, "node-old", Role::kNode, expired).ok());
    ASSERT_TRUE(ca_issue(other_, "coord", Role::kServer).ok());

    auto creds = server_credentials(ca_, "coord");
    ASSERT_TRUE(creds.ok()) << creds.status().to_string();
    server_ = new RunningServer();
    server_->start(*creds);
    ASSERT_NE(server_->server, nullptr);
    ASSERT_GT(server_->port, 0);
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "test server did not start";
    ASSERT_NE(server_->server, nullptr) << "test server did not start";
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete tmp_;
    tmp_ = nullptr;
  }

  static grpc::Status join(const ClientTls& tls, pb::JoinResponse* resp,
                           const std::string& target = "") {
    auto channel = create_channel(target.empty() ? server_->target() : target, tls);
    auto stub = pb::Coordinator::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
    pb::JoinRequest req;
    req.set_node_name("hint-is-ignored");
    return stub->Join(&ctx, req, resp);
  }

  // A refused connection must fail promptly and visibly, never as a deadline.
  static void expect_refused(const ClientTls& tls, const char* what) {
    pb::JoinResponse resp;
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status st = join(tls, &resp);
    EXPECT_FALSE(st.ok()) << what << " was accepted as " << resp.node_id();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << what << ": " << st.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, kRpcDeadline) << what;
    EXPECT_TRUE(resp.node_id().empty()) << what;
  }

  // The refusal, explained the way a node reports a failed Join (probing a cut handshake for
  // the server's verdict).
  static Status explained(const ClientTls& tls) {
    pb::JoinResponse resp;
    grpc::Status st = join(tls, &resp);
    EXPECT_FALSE(st.ok());
    Status ex =
        explain_connect_failure(st, server_->target(), tls, "coordinator at " + server_->target());
    EXPECT_EQ(ex.message().find('\n'), std::string::npos);
    EXPECT_EQ(ex.message().rfind("coordinator at " + server_->target(), 0), 0u) << ex.message();
    return ex;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline RunningServer* server_ = nullptr;
  static inline std::string ca_, other_;
};

TEST_F(TlsLoopback, NodeCertificateIdentityReachesTheServer) {
  auto tls = client_credentials(ca_, "node-1", "coord");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  pb::JoinResponse resp;
  grpc::Status st = join(*tls, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.node_id(), "node-1");  // from the certificate, not from the request
  EXPECT_EQ(resp.experiment_id(), "node");
}

// A stream that stops moving is cancelled by its StallWatchdog long before its deadline.
TEST_F(TlsLoopback, AStalledStreamIsCancelledByItsWatchdog) {
  auto tls = client_credentials(ca_, "node-1", "coord");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  auto stub = pb::Coordinator::NewStub(create_channel(server_->target(), *tls, "streams"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  pb::PullParamsRequest req;
  req.set_round(kStallingRound);
  const auto t0 = std::chrono::steady_clock::now();
  auto reader = stub->PullParams(&ctx, req);
  StallWatchdog watchdog(ctx, std::chrono::milliseconds(300));
  pb::TensorChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  watchdog.progress();
  EXPECT_FALSE(watchdog.fired());
  EXPECT_FALSE(reader->Read(&chunk));  // returns once the watchdog cancels the call
  EXPECT_TRUE(watchdog.fired());
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, kRpcDeadline);
}

TEST_F(TlsLoopback, AdminRoleAndLocalhostSan) {
  auto tls = client_credentials(ca_, "ops", "localhost");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  pb::JoinResponse resp;
  grpc::Status st = join(*tls, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.node_id(), "ops");
  EXPECT_EQ(resp.experiment_id(), "admin");
  // No override: the target's host 127.0.0.1 must match the IP SAN.
  auto by_ip = client_credentials(ca_, "node-1");
  ASSERT_TRUE(by_ip.ok());
  st = join(*by_ip, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(TlsLoopback, CertificateFromAnotherCaIsRefused) {
  // The client trusts our CA (so only the server's check is tested) but presents a
  // certificate from the other CA.
  const ClientTls stranger = raw_client(ca_cert_path(ca_), key_path(other_, "node-1"),
                                        cert_path(other_, "node-1"), "coord");
  expect_refused(stranger, "certificate from another CA");
  // gRPC reports only "Socket closed"; the probe finds the server's verdict: a certificate
  // verdict, which a node does not retry.
  const Status refused = explained(stranger);
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.message();
  EXPECT_NE(refused.message().find("does not accept this node's certificate"), std::string::npos)
      << refused.message();
  // A client of the other experiment does not trust our server either: OpenSSL's reason.
  auto foreign = client_credentials(other_, "node-1", "coord");
  ASSERT_TRUE(foreign.ok());
  expect_refused(*foreign, "client of another CA");
  const Status distrusted = explained(*foreign);
  EXPECT_EQ(distrusted.code(), StatusCode::kUnauthenticated) << distrusted.message();
  EXPECT_NE(distrusted.message().find("not issued by this experiment's CA"), std::string::npos)
      << distrusted.message();
  // The server sends its chain, the other CA included: OpenSSL finds a self-signed certificate
  // it does not trust.
  EXPECT_NE(distrusted.message().find("(self-signed certificate in certificate chain)"),
            std::string::npos)
      << distrusted.message();
}

TEST_F(TlsLoopback, PlaintextClientIsRefused) {
  expect_refused(insecure_client_credentials(), "plaintext client");
  // No verdict a plaintext client could check: a transport error, retried.
  const Status plain = explained(insecure_client_credentials());
  EXPECT_EQ(plain.code(), StatusCode::kUnavailable) << plain.message();
  EXPECT_NE(plain.message().find("requires TLS"), std::string::npos) << plain.message();
}

TEST_F(TlsLoopback, MissingClientCertificateIsRefused) {
  expect_refused(raw_client(ca_cert_path(ca_), "", "", "coord"), "client without certificate");
}

TEST_F(TlsLoopback, ExpiredCertificateIsCaughtBeforeConnectingAndRefusedIfForced) {
  auto tls = client_credentials(ca_, "node-old", "coord");
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(tls.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(tls.status().message().find("certificate node-old expired on"), std::string::npos)
      << tls.status().message();
  EXPECT_NE(tls.status().message().find("atoll ca issue"), std::string::npos);
  const ClientTls forced =
      raw_client(ca_cert_path(ca_), key_path(ca_, "node-old"), cert_path(ca_, "node-old"), "coord");
  expect_refused(forced, "expired certificate");
  const Status refused = explained(forced);
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.message();
  EXPECT_NE(refused.message().find("does not accept this node's certificate"), std::string::npos)
      << refused.message();
}

TEST_F(TlsLoopback, WrongServerNameFails) {
  auto tls = client_credentials(ca_, "node-1", "not-the-coordinator");
  ASSERT_TRUE(tls.ok());
  expect_refused(*tls, "server name not in the certificate");
  const Status wrong = explained(*tls);
  EXPECT_EQ(wrong.code(), StatusCode::kUnauthenticated) << wrong.message();
  EXPECT_NE(wrong.message().find("not valid for the name 'not-the-coordinator'"), std::string::npos)
      << wrong.message();
}

TEST_F(TlsLoopback, ServerPreValidation) {
  auto missing = server_credentials(ca_, "nobody");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--role server"), std::string::npos)
      << missing.status().message();
  auto node_as_server = server_credentials(ca_, "node-1");
  EXPECT_EQ(node_as_server.status().code(), StatusCode::kInvalidArgument);
  auto bad_name = server_credentials(ca_, "../coord");
  EXPECT_EQ(bad_name.status().code(), StatusCode::kInvalidArgument);
}

// Raw OpenSSL client: which TLS versions does the server accept?
struct SslCtxDel {
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
};
struct SslDel {
  void operator()(SSL* p) const { SSL_free(p); }
};
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Returns the negotiated protocol version, or 0 when the handshake failed.
int handshake(int port, int max_version, const std::string& dir) {
  std::unique_ptr<SSL_CTX, SslCtxDel> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return 0;
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx.get(), max_version);
  EXPECT_EQ(
      SSL_CTX_use_certificate_file(ctx.get(), cert_path(dir, "node-1").c_str(), SSL_FILETYPE_PEM),
      1);
  EXPECT_EQ(
      SSL_CTX_use_PrivateKey_file(ctx.get(), key_path(dir, "node-1").c_str(), SSL_FILETYPE_PEM), 1);
  EXPECT_EQ(SSL_CTX_load_verify_locations(ctx.get(), ca_cert_path(dir).c_str(), nullptr), 1);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));

  Fd sock{::socket(AF_INET, SOCK_STREAM, 0)};
  timeval tv{5, 0};  // a stuck handshake fails the test instead of hanging it
  setsockopt(sock.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(sock.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 0;
  std::unique_ptr<SSL, SslDel> ssl(SSL_new(ctx.get()));
  SSL_set_fd(ssl.get(), sock.fd);
  SSL_set_tlsext_host_name(ssl.get(), "coord");
  SSL_set1_host(ssl.get(), "coord");
  const int rc = SSL_connect(ssl.get());
  const int version = rc == 1 ? SSL_version(ssl.get()) : 0;
  if (rc == 1) SSL_shutdown(ssl.get());
  ossl::last_error();  // drop queued errors of the failed handshake
  return version;
}

TEST_F(TlsLoopback, ServerSpeaksOnlyTls13) {
  EXPECT_EQ(handshake(server_->port, TLS1_3_VERSION, ca_), TLS1_3_VERSION);
  EXPECT_EQ(handshake(server_->port, TLS1_2_VERSION, ca_), 0) << "a TLS 1.2 client was accepted";
}

// Collects the server's refusal lines (HandshakeRefusalLog) for one client at a time.
class RefusalLines {
 public:
  RefusalLines()
      : log_([this](const std::string& line) {
          std::lock_guard<std::mutex> l(mu_);
          lines_.push_back(line);
          cv_.notify_all();
        }) {}
  // Runs `connect`, then waits at most `wait` for the server's line about it (the server may log
  // just after the client has seen the failure).
  std::vector<std::string> refusals_of(const std::function<void()>& connect,
                                       std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    {
      std::lock_guard<std::mutex> l(mu_);
      lines_.clear();
    }
    connect();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, wait, [this] { return !lines_.empty(); });
    return lines_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  HandshakeRefusalLog log_;
};

// Every line the server logged for one client starts "refused a connection" and matches `want`.
void expect_refusal_line(const std::vector<std::string>& lines, const std::string& want,
                         const char* what) {
  ASSERT_FALSE(lines.empty()) << what << ": the server logged no refusal";
  for (const auto& line : lines) {
    EXPECT_EQ(line.rfind("refused a connection", 0), 0u) << what << ": " << line;
    EXPECT_TRUE(std::regex_search(line, std::regex(want))) << what << ": " << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << what << ": " << line;
  }
}

TEST_F(TlsLoopback, ServerExplainsEachRefusedConnectionInOneLine) {
  RefusalLines server_log;
  auto refusals = [&](const ClientTls& tls) {
    return server_log.refusals_of([&] {
      pb::JoinResponse resp;
      EXPECT_FALSE(join(tls, &resp).ok());
    });
  };
  expect_refusal_line(refusals(raw_client(ca_cert_path(ca_), key_path(other_, "node-1"),
                                          cert_path(other_, "node-1"), "coord")),
                      "not issued by this experiment's CA", "certificate of another CA");
  expect_refusal_line(refusals(raw_client(ca_cert_path(ca_), key_path(ca_, "node-old"),
                                          cert_path(ca_, "node-old"), "coord")),
                      "or it has expired", "expired certificate");
  expect_refusal_line(refusals(raw_client(ca_cert_path(ca_), "", "", "coord")),
                      "presented no certificate", "no client certificate");
  expect_refusal_line(refusals(insecure_client_credentials()), "a plaintext client",
                      "plaintext client");
  expect_refusal_line(
      server_log.refusals_of([&] { EXPECT_EQ(handshake(server_->port, TLS1_2_VERSION, ca_), 0); }),
      "older than 1.3", "TLS 1.2 client");
  // An accepted client is not reported.
  auto good = client_credentials(ca_, "node-1", "coord");
  ASSERT_TRUE(good.ok());
  pb::JoinResponse resp;
  EXPECT_TRUE(server_log
                  .refusals_of([&] { EXPECT_TRUE(join(*good, &resp).ok()); },
                               std::chrono::milliseconds(500))
                  .empty());
  // A client of another experiment: the server rejects its certificate, unless the client
  // rejected the server's first and hung up (both happen, depending on timing, and both can be
  // logged, the second one late). Last, so a late line cannot land in another case's window.
  auto foreign = client_credentials(other_, "node-1", "coord");
  ASSERT_TRUE(foreign.ok());
  expect_refusal_line(refusals(*foreign),
                      "not issued by this experiment's CA|does not trust this coordinator's "
                      "certificate",
                      "client of another experiment");
}

// The probe behind explain_connect_failure, case by case: a client the server accepts, one whose
// certificate it refuses (gRPC says only "Socket closed"), and one that refuses the server's.
TEST_F(TlsLoopback, HandshakeProbeFindsTheVerdictGrpcDoesNotReport) {
  auto good = client_credentials(ca_, "node-1", "coord");
  ASSERT_TRUE(good.ok() && good->identity);
  ProbeResult r = probe_tls_handshake(server_->target(), *good->identity, kRpcDeadline);
  EXPECT_EQ(r.outcome, ProbeOutcome::kAccepted) << r.detail;

  const ClientTls stranger = raw_client(ca_cert_path(ca_), key_path(other_, "node-1"),
                                        cert_path(other_, "node-1"), "coord");
  r = probe_tls_handshake(server_->target(), *stranger.identity, kRpcDeadline);
  EXPECT_EQ(r.outcome, ProbeOutcome::kClientCertificateRefused) << r.detail;

  auto foreign = client_credentials(other_, "node-1", "coord");
  ASSERT_TRUE(foreign.ok() && foreign->identity);
  r = probe_tls_handshake(server_->target(), *foreign->identity, kRpcDeadline);
  EXPECT_EQ(r.outcome, ProbeOutcome::kServerCertificateRefused) << r.detail;
  EXPECT_EQ(r.x509_error, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN) << r.detail;

  // A plaintext server does not answer in TLS; nothing listening is no TLS answer at all.
  RunningServer plain;
  plain.start(insecure_server_credentials());
  ASSERT_GT(plain.port, 0);
  r = probe_tls_handshake(plain.target(), *good->identity, kRpcDeadline);
  EXPECT_TRUE(r.outcome == ProbeOutcome::kNotTls || r.outcome == ProbeOutcome::kCut)
      << static_cast<int>(r.outcome) << " " << r.detail;
  const std::string gone = plain.target();
  plain.server->Shutdown(std::chrono::system_clock::now());
  plain.server->Wait();
  plain.server.reset();
  r = probe_tls_handshake(gone, *good->identity, kRpcDeadline);
  EXPECT_EQ(r.outcome, ProbeOutcome::kUnreachable) << r.detail;
}

// Two servers that own their port (apply_exclusive_port, as the coordinator's and the teacher's
// do): the second cannot bind the first one's port, and check_can_listen names it. (gRPC's
// default, SO_REUSEPORT, would let both listen and split the clients between them.)
TEST(ExclusivePort, SecondServerOnTheSamePortFails) {
  TestCoordinator first_service, second_service;
  int port = 0;
  grpc::ServerBuilder first;
  first.AddListeningPort("127.0.0.1:0", insecure_server_credentials(), &port);
  first.RegisterService(&first_service);
  apply_exclusive_port(first);
  auto owner = first.BuildAndStart();
  ASSERT_TRUE(owner && port > 0);
  const std::string listen = "127.0.0.1:" + std::to_string(port);

  int second_port = 0;
  grpc::ServerBuilder second;
  second.AddListeningPort(listen, insecure_server_credentials(), &second_port);
  second.RegisterService(&second_service);
  apply_exclusive_port(second);
  auto intruder = second.BuildAndStart();
  EXPECT_TRUE(intruder == nullptr || second_port == 0) << "a second server bound " << listen;

  const Status why = check_can_listen(listen, "--listen");
  EXPECT_EQ(why.code(), StatusCode::kUnavailable);
  EXPECT_EQ(why.message(), "port " + listen +
                               " is already in use by another process; stop it or choose "
                               "another --listen");
  owner->Shutdown(std::chrono::system_clock::now());
  owner->Wait();
  owner.reset();
  EXPECT_TRUE(check_can_listen(listen, "--listen").ok()) << "the port is free again";
}

TEST(HandshakeRefusal, ClassifiesGrpcHandshakeMessages) {
  const std::string pre =
      "Handshake failed with fatal error SSL_ERROR_SSL: error:0A000086:SSL "
      "routines::";
  EXPECT_FALSE(explain_handshake_failure("Server listening on 127.0.0.1:1").has_value());
  auto expired = explain_handshake_failure(pre + "certificate verify failed.");
  ASSERT_TRUE(expired.has_value());
  EXPECT_NE(expired->find("atoll ca issue"), std::string::npos) << *expired;
  auto other = explain_handshake_failure(pre + "something new.");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(*other, "refused a connection: TLS handshake failed (something new)");
  // The debug-level report of a client that hung up carries its address.
  auto hung = explain_handshake_failure(
      "Security handshake failed: UNKNOWN:Handshake read failed {file_line:487, children:"
      "[INTERNAL:Socket closed {target_address:\"ipv4:127.0.0.1:53426\", grpc_status:14}]}");
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rfind("refused a connection from 127.0.0.1:53426: the client hung up", 0), 0u)
      << *hung;
  // A node's --server-name that the certificate does not hold: gRPC's raw line becomes the fix.
  auto name = explain_handshake_failure("No match found for server name: coord.example.org.");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->rfind("a client asked for this coordinator by the name 'coord.example.org', ", 0),
            0u)
      << *name;
  EXPECT_NE(name->find("--san coord.example.org"), std::string::npos) << *name;
  auto control = explain_handshake_failure(
      "No match found for server name: a\x01"
      "b.");
  ASSERT_TRUE(control.has_value());
  EXPECT_NE(control->find("'a?b'"), std::string::npos) << *control;
  // gRPC's debug-level repeat of a TLS failure is not a second refusal.
  EXPECT_FALSE(explain_handshake_failure(
                   "Security handshake failed: UNKNOWN:Ssl handshake failed: SSL_ERROR_SSL: "
                   "error:0A000086:SSL routines::certificate verify failed {tsi_code:10}")
                   .has_value());
}

TEST_F(TlsLoopback, TensorStreamsOverGrpc) {
  auto tls = client_credentials(ca_, "node-1", "coord");
  ASSERT_TRUE(tls.ok());
  auto stub = pb::Coordinator::NewStub(create_channel(server_->target(), *tls));

  // Pull 3 MiB + 5 KiB: four chunks, each under the message bound.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
    pb::PullParamsRequest req;
    req.set_round(3 * 1024 + 5);
    auto reader = stub->PullParams(&ctx, req);
    ChunkAssembler assembler(16u << 20);
    pb::TensorChunk chunk;
    while (reader->Read(&chunk)) ASSERT_TRUE(assembler.add(chunk).ok());
    ASSERT_TRUE(reader->Finish().ok());
    ASSERT_TRUE(assembler.finish().ok());
    EXPECT_EQ(assembler.chunks_received(), 4u);
    EXPECT_EQ(assembler.take_payload(), deterministic_payload((3 * 1024 + 5) * 1024));
  }

  auto push = [&](const std::vector<pb::TensorChunk>& chunks, pb::PushUpdateResponse* resp,
                  pb::Coordinator::Stub* via) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
    auto writer = via->PushUpdate(&ctx, resp);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };

  const std::string payload = deterministic_payload(2 * kMaxChunkBytes + 17);
  auto chunks = chunk_payload(pb::TensorHeader(), payload);
  ASSERT_TRUE(chunks.ok());
  pb::PushUpdateResponse resp;
  grpc::Status st = push(*chunks, &resp, stub.get());
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.accepted());
  const std::string digest = payload_digest(payload);
  EXPECT_EQ(resp.message(), to_hex(reinterpret_cast<const uint8_t*>(digest.data()), 16));

  // Corruption is reported back with the assembler's code and message.
  auto corrupt = *chunks;
  (*corrupt[1].mutable_data())[99] ^= 4;
  st = push(corrupt, &resp, stub.get());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_NE(st.error_message().find("CRC-32C mismatch"), std::string::npos) << st.error_message();
  EXPECT_EQ(from_grpc(st).code(), StatusCode::kDataLoss);

  // Bytes changed with the chunk's CRC-32C recomputed and the header's digest unchanged: the
  // payload digest refuses the stream, in one line.
  auto recrc = *chunks;
  std::string& data = *recrc[2].mutable_data();
  data[3] = static_cast<char>(data[3] ^ 0x20);
  recrc[2].set_crc32c(crc32c(data));
  st = push(recrc, &resp, stub.get());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_NE(st.error_message().find("payload XXH3-128 mismatch"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(st.error_message().find('\n'), std::string::npos) << st.error_message();

  // An oversize message is refused by the server's bound even if the client does not limit it.
  pb::TensorChunk huge;
  huge.set_data(std::string(2 * kMaxChunkBytes, 'x'));
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("coord");
  args.SetMaxSendMessageSize(-1);
  auto unbounded = pb::Coordinator::NewStub(
      grpc::CreateCustomChannel(server_->target(), tls->credentials, args));
  st = push({huge}, &resp, unbounded.get());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  // Our own channel refuses to send it in the first place.
  st = push({huge}, &resp, stub.get());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
}

TEST(ExplainCallError, NothingListening) {
  // Bind and release a port so that nothing listens on it.
  int port = 0;
  {
    RunningServer s;
    s.start(insecure_server_credentials());
    port = s.port;
  }
  const std::string target = "127.0.0.1:" + std::to_string(port);
  auto stub = pb::Coordinator::NewStub(create_channel(target, insecure_client_credentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
  pb::JoinResponse resp;
  grpc::Status st = stub->Join(&ctx, pb::JoinRequest(), &resp);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  Status ex =
      explain_call_error(st, target, insecure_client_credentials(), "coordinator at " + target);
  EXPECT_EQ(ex.code(), StatusCode::kUnavailable);
  EXPECT_EQ(ex.message(), "coordinator at " + target + " not reachable (connection refused)");
  // Non-connection errors pass through.
  EXPECT_EQ(explain_call_error(grpc::Status(grpc::StatusCode::DATA_LOSS, "crc"), target,
                               insecure_client_credentials())
                .code(),
            StatusCode::kDataLoss);
}

TEST(InsecureMode, PlaintextWorksButCarriesNoIdentity) {
  RunningServer server;
  server.start(insecure_server_credentials());
  ASSERT_GT(server.port, 0);
  auto stub =
      pb::Coordinator::NewStub(create_channel(server.target(), insecure_client_credentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
  pb::JoinResponse resp;
  grpc::Status st = stub->Join(&ctx, pb::JoinRequest(), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  EXPECT_NE(st.error_message().find("no verified client certificate"), std::string::npos);
}

}  // namespace
}  // namespace atl::transport
