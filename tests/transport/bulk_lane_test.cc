// The bulk lane (transport/bulk_lane.h): a real server and real clients over TLS 1.3 on
// loopback, certificates from a real CA, and raw TLS clients that break the protocol.
#include "transport/bulk_lane.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/file_io.h"
#include "tests/transport/test_cas.h"
#include "transport/payload_digest.h"
#include "tools/temp_dir.h"
#include "transport/tensor_stream.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"
#include "transport/tls/openssl_util.h"
#include "transport/tls/tls_socket.h"

namespace atl::transport {
namespace {

using atl::testing::TempDir;
using namespace std::chrono_literals;
namespace pb = atoll_pb::v1;

std::string deterministic_payload(size_t n, uint32_t salt = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(((i + salt) * 2654435761u) >> 13);
  return s;
}

// Polls `cond` until true or 5 s passed; its last value.
bool eventually(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// Serves `pull_payload` to every pull (round 0 only), keeps what pushes bring; refusals on demand.
class RecordingHandler final : public BulkHandler {
 public:
  std::string pull_payload = deterministic_payload(3 << 20);
  uint64_t max_push_bytes = 16 << 20;

  StatusOr<Pull> pull(const PeerIdentity& peer, const pb::PullParamsRequest& req) override {
    if (req.round() != 0)
      return FailedPrecondition("round " + std::to_string(req.round()) + " is not open");
    std::lock_guard<std::mutex> lk(mu);
    callers.push_back(peer.name + "/" + peer.role);
    Pull p;
    p.header.set_wire_version(kWireVersion);
    p.header.set_codec("bytes");
    p.header.set_numel(pull_payload.size() / 4);
    p.header.set_payload_bytes(pull_payload.size());
    p.payload = pull_payload;
    return p;
  }
  void pull_sent(const PeerIdentity&, const Pull&) override { pulls_sent.fetch_add(1); }

  StatusOr<PushAdmission> begin_push(const PeerIdentity& peer, const pb::TensorHeader& h) override {
    if (h.round() == 99) return PermissionDenied("round 99 is refused by the test");
    std::lock_guard<std::mutex> lk(mu);
    callers.push_back(peer.name + "/" + peer.role);
    began.push_back(h.SerializeAsString());
    return PushAdmission{max_push_bytes, {}, std::make_shared<int>(7)};
  }
  void abort_push(const std::shared_ptr<void>& session, const pb::TensorHeader&,
                  const Status& why) override {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(*static_cast<int*>(session.get()), 7);
    aborts.push_back(why);
  }
  StatusOr<pb::PushUpdateResponse> finish_push(const std::shared_ptr<void>& session,
                                               const pb::TensorHeader& h, std::string payload,
                                               std::chrono::steady_clock::time_point) override {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(*static_cast<int*>(session.get()), 7);
    // The header is the one begin_push screened, byte for byte.
    EXPECT_FALSE(began.empty());
    if (!began.empty()) {
      EXPECT_EQ(h.SerializeAsString(), began.back());
    }
    pushed.push_back(std::move(payload));
    pb::PushUpdateResponse r;
    r.set_accepted(true);
    r.set_message("kept " + std::to_string(pushed.back().size()) + " bytes");
    return r;
  }

  Status still_admitted(const PeerIdentity& peer) override {
    admission_checks.fetch_add(1);
    return revoked.load() ? PermissionDenied("'" + peer.name + "' was revoked by the test")
                          : Status::Ok();
  }

  std::mutex mu;
  std::vector<std::string> callers, began, pushed;
  std::vector<Status> aborts;
  std::atomic<int> pulls_sent{0};
  std::atomic<int> admission_checks{0};
  std::atomic<bool> revoked{false};
};

class BulkLane : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    ca_ = tmp_->sub("ca");
    other_ = tmp_->sub("other-ca");
    ASSERT_NO_FATAL_FAILURE(testing::issue_test_cas(ca_, other_));
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }

  void SetUp() override { start({}); }

  void start(BulkLaneOptions o) {
    server_.reset();
    auto id = server_identity(ca_, "coord");
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    o.listen = "127.0.0.1:0";
    o.tls = *id;
    auto s = BulkLaneServer::start(o, handler_);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  static std::shared_ptr<const TlsIdentity> identity(const std::string& dir,
                                                     const std::string& name) {
    auto pem = [](const std::string& path) {
      auto t = atl::read_file(path);
      EXPECT_TRUE(t.ok()) << path;
      return t.ok() ? *t : std::string();
    };
    return std::make_shared<const TlsIdentity>(
        TlsIdentity{pem(ca_cert_path(ca_)), pem(cert_path(dir, name)), pem(key_path(dir, name))});
  }

  BulkLaneClient client(const std::string& cert_dir = "", const std::string& name = "node-1",
                        const std::string& server_name = "coord") const {
    BulkLaneClientOptions o;
    o.target = target();
    o.identity = identity(cert_dir.empty() ? ca_ : cert_dir, name);
    o.server_name = server_name;
    o.connect_timeout = 5s;
    o.stall_timeout = 5s;
    return BulkLaneClient(o);
  }

  // A raw TLS connection to the lane (ALPN "atoll-bulk") as node-1, for broken protocol.
  struct Raw {
    tls_socket::Socket socket;
    tls_socket::SslPtr ssl;
    bool handshaken = false;
  };
  Raw raw(bool alpn = true) const {
    Raw r;
    std::string error;
    static tls_socket::SslCtxPtr ctx;  // kept: SSL objects refer to it
    ctx = tls_socket::client_context(*identity(ca_, "node-1"), &error);
    EXPECT_TRUE(ctx) << error;
    if (alpn) {
      static const unsigned char kAlpn[] = {10, 'a', 't', 'o', 'l', 'l', '-', 'b', 'u', 'l', 'k'};
      SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
    } else {
      static const unsigned char kH2[] = {2, 'h', '2'};
      SSL_CTX_set_alpn_protos(ctx.get(), kH2, sizeof(kH2));
    }
    r.socket = tls_socket::connect_tcp("127.0.0.1", std::to_string(server_->port()),
                                       std::chrono::steady_clock::now() + 5s, &error);
    EXPECT_GE(r.socket.fd(), 0) << error;
    r.ssl.reset(SSL_new(ctx.get()));
    SSL_set_fd(r.ssl.get(), r.socket.fd());
    r.handshaken = SSL_connect(r.ssl.get()) == 1;
    ossl::last_error();
    return r;
  }

  // Everything the server sends until it closes (at most 1 MiB).
  static std::string read_to_end(SSL* ssl) {
    std::string out;
    char buf[4096];
    for (;;) {
      size_t got = 0;
      if (SSL_read_ex(ssl, buf, sizeof(buf), &got) != 1) break;
      out.append(buf, got);
      if (out.size() > (1u << 20)) break;
    }
    ossl::last_error();
    return out;
  }

  static std::string request(uint8_t op, const std::string& body) {
    std::string f = {'A', 'T', 'L', 'Q', 1, static_cast<char>(op), 0, 0};
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((body.size() >> (8 * i)) & 0xff));
    return f + body;
  }

  // Sends a push request for `h` and reads the server's go-ahead (an OK reply with no body).
  static void send_push_header(SSL* ssl, const pb::TensorHeader& h) {
    const std::string req = request(2, h.SerializeAsString());
    ASSERT_EQ(SSL_write(ssl, req.data(), static_cast<int>(req.size())),
              static_cast<int>(req.size()));
    char head[12];
    size_t got = 0;
    ASSERT_EQ(SSL_read_ex(ssl, head, sizeof(head), &got), 1);
    ASSERT_EQ(got, 12u);
    EXPECT_EQ(std::string(head, 4), "ATLR");
    EXPECT_EQ(head[5], 0);                                      // go ahead
    EXPECT_EQ(std::string(head + 8, 4), std::string(4, '\0'));  // no body
  }

  static pb::TensorHeader push_header(size_t bytes, uint64_t round = 0) {
    pb::TensorHeader h;
    h.set_wire_version(kWireVersion);
    h.set_experiment_id("x");
    h.set_round(round);
    h.set_codec("bytes");
    h.set_numel(bytes / 4);
    h.set_payload_bytes(bytes);
    return h;
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string ca_, other_;
  // Raw clients write to connections the server closed: EPIPE, not a dead test process.
  const tls_socket::SigpipeBlock no_sigpipe_;
  RecordingHandler handler_;
  std::unique_ptr<BulkLaneServer> server_;
};

TEST_F(BulkLane, PullAndPushCarryTheBytesAndTheCertificateNamesTheCaller) {
  BulkLaneClient c = client();
  pb::PullParamsRequest req;
  pb::TensorHeader h;
  std::string payload = "previous contents";
  bool reached = false;
  ASSERT_TRUE(c.pull(req, 64 << 20, &h, &payload, &reached).ok());
  EXPECT_TRUE(reached);
  EXPECT_EQ(payload, handler_.pull_payload);
  // The digest that came after the payload, checked, is in the header.
  EXPECT_EQ(h.payload_xxh3(), payload_digest(handler_.pull_payload));
  EXPECT_EQ(h.payload_bytes(), handler_.pull_payload.size());

  // A push, hashed as it is sent; and one whose digest the caller knew.
  const std::string update = deterministic_payload(5 << 20, 17);
  pb::PushUpdateResponse resp;
  double sent = -1;
  ASSERT_TRUE(c.push(push_header(update.size()), update, &resp, &reached, &sent).ok());
  EXPECT_TRUE(resp.accepted());
  EXPECT_EQ(resp.message(), "kept 5242880 bytes");
  EXPECT_GE(sent, 0.0);
  pb::TensorHeader known = push_header(update.size());
  known.set_payload_xxh3(payload_digest(update));
  ASSERT_TRUE(c.push(known, update, &resp, &reached).ok());
  // An empty payload travels too.
  ASSERT_TRUE(c.push(push_header(0), "", &resp, &reached).ok());

  std::lock_guard<std::mutex> lk(handler_.mu);
  ASSERT_EQ(handler_.pushed.size(), 3u);
  EXPECT_EQ(handler_.pushed[0], update);
  EXPECT_EQ(handler_.pushed[1], update);
  EXPECT_TRUE(handler_.pushed[2].empty());
  for (const std::string& who : handler_.callers) EXPECT_EQ(who, "node-1/node");
  EXPECT_EQ(handler_.pulls_sent.load(), 1);
  EXPECT_EQ(server_->pulls_sent(), 1u);
  EXPECT_EQ(server_->pushes_received(), 3u);
  EXPECT_TRUE(handler_.aborts.empty());
}

// A transfer asks the handler every 4 MiB whether its caller may go on: a certificate revoked
// while it runs cuts it there, and a cut push is aborted, never delivered.
TEST_F(BulkLane, ATransferStopsWhenItsCallerIsNoLongerAdmitted) {
  BulkLaneClient c = client();
  const std::string small = handler_.pull_payload;
  handler_.pull_payload = deterministic_payload(9 << 20);
  pb::PullParamsRequest req;
  pb::TensorHeader h;
  std::string payload;
  bool reached = false;
  ASSERT_TRUE(c.pull(req, 64 << 20, &h, &payload, &reached).ok());  // admitted: 2 checks
  EXPECT_EQ(handler_.admission_checks.load(), 35);  // 9 MiB in 256 KiB pieces: 36, checked between
  handler_.revoked = true;
  EXPECT_FALSE(c.pull(req, 64 << 20, &h, &payload, &reached).ok());
  EXPECT_EQ(handler_.pulls_sent.load(), 1);
  const std::string update = deterministic_payload(9 << 20, 5);
  pb::PushUpdateResponse resp;
  EXPECT_FALSE(c.push(push_header(update.size()), update, &resp, &reached).ok());
  handler_.revoked = false;
  handler_.pull_payload = small;
  std::lock_guard<std::mutex> lk(handler_.mu);
  EXPECT_TRUE(handler_.pushed.empty());
  ASSERT_EQ(handler_.aborts.size(), 1u);
  EXPECT_EQ(handler_.aborts[0].code(), StatusCode::kPermissionDenied)
      << handler_.aborts[0].to_string();
}

TEST_F(BulkLane, RefusalsTravelWithTheirCodeAndARefusedPushSendsNoPayload) {
  BulkLaneClient c = client();
  pb::PullParamsRequest req;
  req.set_round(3);
  pb::TensorHeader h;
  std::string payload;
  bool reached = false;
  Status st = c.pull(req, 64 << 20, &h, &payload, &reached);
  EXPECT_TRUE(reached);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "round 3 is not open")) << st.message();
  EXPECT_TRUE(contains(st.message(), "bulk lane at " + target())) << st.message();

  // Refused at the header: the 8 MiB payload is never sent (the server would have had to read
  // it), and nothing is aborted (nothing began).
  const std::string big = deterministic_payload(8 << 20);
  pb::PushUpdateResponse resp;
  double sent = -1;
  st = c.push(push_header(big.size(), 99), big, &resp, &reached, &sent);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.to_string();
  EXPECT_EQ(sent, -1);

  // Above the handler's limit: OutOfRange before any allocation, and the begun push aborted.
  handler_.max_push_bytes = 1 << 20;
  st = c.push(push_header(2 << 20), deterministic_payload(2 << 20), &resp, &reached);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  {
    std::lock_guard<std::mutex> lk(handler_.mu);
    ASSERT_EQ(handler_.aborts.size(), 1u);
    EXPECT_EQ(handler_.aborts[0].code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(handler_.pushed.empty());
  }
  // A pull announced above the client's limit is refused before allocating.
  st = c.pull(pb::PullParamsRequest(), 1024, &h, &payload, &reached);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
}

TEST_F(BulkLane, StrangersAndGrpcClientsDoNotGetThrough) {
  pb::TensorHeader h;
  std::string payload;
  bool reached = true;
  // A certificate from another CA: the server refuses the handshake (TLS 1.3 tells the client
  // after its side finished, so the failure may come with the first read); no handler call.
  Status st = client(other_).pull(pb::PullParamsRequest(), 64 << 20, &h, &payload, &reached);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  // The server name is checked as gRPC checks it.
  reached = true;
  st = client("", "node-1", "not-the-coordinator")
           .pull(pb::PullParamsRequest(), 64 << 20, &h, &payload, &reached);
  EXPECT_FALSE(reached);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(contains(st.message(), "its certificate")) << st.message();
  // A client that speaks HTTP/2 (gRPC) fails the handshake: no protocol in common.
  Raw h2 = raw(/*alpn=*/false);
  EXPECT_FALSE(h2.handshaken);
  // An admin certificate gets through TLS; the handler sees its role (the coordinator refuses
  // every role but node).
  ASSERT_TRUE(
      client("", "ops").pull(pb::PullParamsRequest(), 64 << 20, &h, &payload, &reached).ok());
  std::lock_guard<std::mutex> lk(handler_.mu);
  ASSERT_EQ(handler_.callers.size(), 1u);
  EXPECT_EQ(handler_.callers[0], "ops/admin");
  EXPECT_EQ(server_->pulls_sent(), 1u);
}

TEST_F(BulkLane, MalformedRequestsGetOneLineAndTheServerGoesOn) {
  struct Case {
    std::string bytes;
    StatusCode code;
    const char* says;
  };
  std::string too_long = request(1, "");
  too_long[8] = '\x01';
  too_long[10] = '\x01';  // L = 65537
  std::string reserved = request(1, "");
  reserved[6] = 1;
  std::string version = request(1, "");
  version[4] = 9;
  const std::vector<Case> cases = {
      {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", StatusCode::kInvalidArgument, "not a bulk lane frame"},
      {version, StatusCode::kInvalidArgument, "bulk lane version 9"},
      {reserved, StatusCode::kInvalidArgument, "reserved bytes"},
      {too_long, StatusCode::kOutOfRange, "exceeds the limit of 65536"},
      {request(7, ""), StatusCode::kInvalidArgument, "unknown operation 7"},
      {request(1, std::string("\xff\xff\xff", 3)), StatusCode::kInvalidArgument,
       "not a PullParamsRequest"},
  };
  for (const Case& k : cases) {
    Raw r = raw();
    ASSERT_TRUE(r.handshaken);
    ASSERT_EQ(SSL_write(r.ssl.get(), k.bytes.data(), static_cast<int>(k.bytes.size())),
              static_cast<int>(k.bytes.size()));
    const std::string reply = read_to_end(r.ssl.get());
    ASSERT_GE(reply.size(), 12u) << k.says;
    EXPECT_EQ(reply.substr(0, 4), "ATLR");
    EXPECT_EQ(static_cast<uint8_t>(reply[5]), static_cast<uint8_t>(k.code)) << k.says;
    const std::string message = reply.substr(12);
    EXPECT_TRUE(contains(message, k.says)) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // And a well-formed client still gets its payload.
  pb::TensorHeader h;
  std::string payload;
  bool reached = false;
  ASSERT_TRUE(client().pull(pb::PullParamsRequest(), 64 << 20, &h, &payload, &reached).ok());
  EXPECT_EQ(payload, handler_.pull_payload);
}

TEST_F(BulkLane, CorruptOrCutPushesAreAbortedAndNeverDelivered) {
  const std::string update = deterministic_payload(1 << 20, 5);
  const pb::TensorHeader h = push_header(update.size());
  {  // The payload, then a digest that is not its own.
    Raw r = raw();
    ASSERT_TRUE(r.handshaken);
    ASSERT_NO_FATAL_FAILURE(send_push_header(r.ssl.get(), h));
    std::string body = update + std::string(kPayloadDigestBytes, 'x');
    ASSERT_EQ(SSL_write(r.ssl.get(), body.data(), static_cast<int>(body.size())),
              static_cast<int>(body.size()));
    const std::string reply = read_to_end(r.ssl.get());
    ASSERT_GE(reply.size(), 12u);
    EXPECT_EQ(static_cast<uint8_t>(reply[5]), static_cast<uint8_t>(StatusCode::kDataLoss));
    EXPECT_TRUE(contains(reply.substr(12), "XXH3-128 does not match")) << reply.substr(12);
  }
  {  // Half the payload, then the connection closes.
    Raw r = raw();
    ASSERT_TRUE(r.handshaken);
    ASSERT_NO_FATAL_FAILURE(send_push_header(r.ssl.get(), h));
    ASSERT_EQ(SSL_write(r.ssl.get(), update.data(), static_cast<int>(update.size() / 2)),
              static_cast<int>(update.size() / 2));
    r.ssl.reset();
    r.socket = tls_socket::Socket();
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lk(handler_.mu);
    return handler_.aborts.size() == 2;
  }));
  std::lock_guard<std::mutex> lk(handler_.mu);
  EXPECT_EQ(handler_.aborts[0].code(), StatusCode::kDataLoss);
  EXPECT_EQ(handler_.aborts[1].code(), StatusCode::kUnavailable);
  EXPECT_TRUE(contains(handler_.aborts[1].message(), "524288 of 1048576 bytes"))
      << handler_.aborts[1].message();
  EXPECT_TRUE(handler_.pushed.empty());
  EXPECT_EQ(server_->pushes_received(), 0u);
}

TEST_F(BulkLane, SilentAndSlowConnectionsAreDroppedWithinTheHandshakeTimeout) {
  BulkLaneOptions o;
  o.handshake_timeout = 400ms;
  start(o);
  // A TCP connection that never starts TLS, and one that completes TLS and then sends its request
  // a byte at a time, each byte within the timeout but the whole not.
  std::string error;
  tls_socket::Socket silent = tls_socket::connect_tcp(
      "127.0.0.1", std::to_string(server_->port()), std::chrono::steady_clock::now() + 5s, &error);
  ASSERT_GE(silent.fd(), 0) << error;
  Raw slow = raw();
  ASSERT_TRUE(slow.handshaken);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string req = request(1, "");
  bool cut = false;
  for (char byte : req) {
    if (SSL_write(slow.ssl.get(), &byte, 1) != 1) {
      cut = true;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  // The server closed it without an answer about 400 ms in, before the last byte (a timeout per
  // read would have let all 12 bytes through and answered).
  EXPECT_TRUE(cut);
  EXPECT_EQ(read_to_end(slow.ssl.get()), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  char byte = 0;
  EXPECT_EQ(::recv(silent.fd(), &byte, 1, 0), 0);  // closed by the server
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  ASSERT_TRUE(eventually([&] { return server_->open_connections() == 0; }));
}

TEST_F(BulkLane, ConnectionCapRefusesAtAcceptAndStopCutsATransferInFlight) {
  BulkLaneOptions o;
  o.caps.max_connections = 2;
  o.caps.max_per_address = 0;
  o.handshake_timeout = 10s;
  start(o);
  Raw a = raw(), b = raw();
  ASSERT_TRUE(a.handshaken);
  ASSERT_TRUE(b.handshaken);
  // The third is closed at accept, before TLS.
  Raw c = raw();
  EXPECT_FALSE(c.handshaken);
  EXPECT_GE(server_->refused_connections(), 1u);

  // `a` begins a push and stalls mid-payload; stop() cuts it and aborts the push.
  ASSERT_NO_FATAL_FAILURE(send_push_header(a.ssl.get(), push_header(1 << 20)));
  const std::string half(1 << 19, 'z');
  ASSERT_EQ(SSL_write(a.ssl.get(), half.data(), static_cast<int>(half.size())),
            static_cast<int>(half.size()));
  const auto t0 = std::chrono::steady_clock::now();
  server_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  std::lock_guard<std::mutex> lk(handler_.mu);
  ASSERT_EQ(handler_.aborts.size(), 1u);
  EXPECT_EQ(handler_.aborts[0].code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace atl::transport

namespace atl::transport {
namespace {

// A push's upload time is the exchange less what the coordinator spent after the last byte: the
// writes end once the bytes are buffered (111 kB "pushed in 0.001 s" over a 1 Mbit/s link).
TEST(PushUploadSeconds, IsTheCallLessTheCoordinatorsTimeAfterThePayload) {
  atoll_pb::v1::PushUpdateResponse answer;
  answer.set_seconds_after_payload(0.25);
  EXPECT_DOUBLE_EQ(push_upload_seconds(1.25, 0.001, answer), 1.0);
  // A coordinator that does not say (0), or a figure the call cannot hold: when writes ended.
  answer.set_seconds_after_payload(0);
  EXPECT_DOUBLE_EQ(push_upload_seconds(1.25, 0.001, answer), 0.001);
  answer.set_seconds_after_payload(2.0);
  EXPECT_DOUBLE_EQ(push_upload_seconds(1.25, 0.001, answer), 0.001);
}

}  // namespace
}  // namespace atl::transport
