// The dashboard's connection limits against a real HTTPS server (TLS 1.3, a fresh dev CA, a real
// RocksDB store): the tester's lock-out — 256 idle TCP connections plus 300 idle connections
// after the TLS handshake — no longer keeps an authenticated request out, and the idle
// connections are closed, by eviction under the caps or by the handshake, header and keep-alive
// timeouts.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/auth.h"
#include "coordinator/http/server.h"
#include "coordinator/test_util.h"
#include "transport/tls/ca.h"

namespace atl::coordinator {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kIdleTcp = 256;  // the tester's numbers
constexpr int kIdleTls = 300;

// The test holds both ends of ~560 connections: raise the soft descriptor limit to the hard one.
void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Whether the peer has closed `fd` by `deadline` (bytes it sent first, such as TLS session
// tickets or a close_notify, are read and skipped); checked without waiting once it has passed.
bool closed_by(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    char buf[4096];
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return true;
  }
}

class HttpLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raise_fd_limit();
    tls_ = dir_.sub("tls");
    ASSERT_TRUE(transport::ca_init(tls_).ok());
    ASSERT_TRUE(transport::ca_issue(tls_, "coordinator", transport::Role::kServer).ok());
    auto store = Store::open(dir_.sub("store"));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
    manager_ = std::make_unique<ExperimentManager>(*store_, ManagerOptions{});
    auto viewer = http::create_token(*store_, http::Role::kViewer, "test viewer");
    ASSERT_TRUE(viewer.ok());
    viewer_ = *viewer;
    client_ctx_.load_verify_file(transport::ca_cert_path(tls_));
    client_ctx_.set_verify_mode(ssl::verify_peer);
  }
  void TearDown() override {
    tls_conns_.clear();
    for (int fd : tcp_fds_) ::close(fd);
    server_.reset();
    manager_.reset();
    store_.reset();
  }

  void start(http::HttpLimits limits) {
    http::HttpOptions ho;
    ho.tls_dir = tls_;
    ho.limits = limits;
    auto server = http::HttpServer::start(*manager_, *store_, ho);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(server).value();
  }

  tcp::endpoint endpoint() const {
    return {net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(server_->port())};
  }

  // `n` TCP connections that never send a byte.
  void open_idle_tcp(int n) {
    for (int i = 0; i < n; ++i) {
      tcp::socket s(ioc_);
      s.connect(endpoint());
      tcp_fds_.push_back(s.release());
    }
  }

  // `n` connections that complete the TLS handshake and then send nothing.
  void open_idle_tls(int n) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_unique<beast::ssl_stream<tcp::socket>>(ioc_, client_ctx_);
      s->next_layer().connect(endpoint());
      s->set_verify_callback(ssl::host_name_verification("coordinator"));
      s->handshake(ssl::stream_base::client);
      tls_conns_.push_back(std::move(s));
    }
  }

  std::vector<int> all_idle_fds() {
    std::vector<int> fds = tcp_fds_;
    for (auto& s : tls_conns_) fds.push_back(s->next_layer().native_handle());
    return fds;
  }

  int count_closed(Clock::time_point deadline) {
    int closed = 0;
    for (int fd : all_idle_fds()) closed += closed_by(fd, deadline) ? 1 : 0;
    return closed;
  }

  // One authenticated request on a new connection: its status (0 on a transport error).
  unsigned real_request(std::string* error) {
    try {
      net::io_context ioc;
      beast::ssl_stream<beast::tcp_stream> stream(ioc, client_ctx_);
      stream.set_verify_callback(ssl::host_name_verification("coordinator"));
      beast::get_lowest_layer(stream).expires_after(10s);
      beast::get_lowest_layer(stream).connect(endpoint());
      stream.handshake(ssl::stream_base::client);
      bhttp::request<bhttp::string_body> req(bhttp::verb::get, "/api/experiments", 11);
      req.set(bhttp::field::host, "coordinator");
      req.set(bhttp::field::authorization, "Bearer " + viewer_);
      bhttp::write(stream, req);
      beast::flat_buffer buf;
      bhttp::response<bhttp::string_body> res;
      bhttp::read(stream, buf, res);
      return res.result_int();
    } catch (const std::exception& e) {
      *error = e.what();
      return 0;
    }
  }

  // The authenticated request succeeds, within `within`.
  void expect_real_request_served(std::chrono::seconds within) {
    const auto t0 = Clock::now();
    std::string error;
    EXPECT_EQ(real_request(&error), 200u) << error;
    EXPECT_LT(Clock::now() - t0, within);
  }

  testing_util::TempDir dir_;
  std::string tls_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ExperimentManager> manager_;
  std::unique_ptr<http::HttpServer> server_;
  std::string viewer_;
  net::io_context ioc_;
  ssl::context client_ctx_{ssl::context::tls_client};
  std::vector<int> tcp_fds_;
  std::vector<std::unique_ptr<beast::ssl_stream<tcp::socket>>> tls_conns_;
};

// Default limits (256 connections, 64 per address, 10 s handshake and header timeouts): the
// flood from one address keeps at most 64 places, each new connection taking the place of the
// longest idle one, and the real request is served at once.
TEST_F(HttpLimitsTest, IdleFloodCannotLockOutARealRequest) {
  start(http::HttpLimits{});
  open_idle_tcp(kIdleTcp);
  open_idle_tls(kIdleTls);
  expect_real_request_served(5s);
  // The flood's connections beyond the per-address cap were closed; within moments (not the
  // 10 s timeouts) all but at most 64 are gone.
  const int closed = count_closed(Clock::now() + 2s);
  EXPECT_GE(closed, kIdleTcp + kIdleTls - 64);
  EXPECT_LE(server_->open_connections("127.0.0.1"), 64u);
  EXPECT_GE(server_->evicted_connections(), static_cast<uint64_t>(kIdleTcp + kIdleTls - 64));
  EXPECT_EQ(server_->refused_connections(), 0u);
}

// Caps large enough for the whole flood (nothing is evicted): the real request is still served,
// and the handshake timeout (TCP without TLS) and the header timeout (TLS without a request)
// close every idle connection.
TEST_F(HttpLimitsTest, HandshakeAndHeaderTimeoutsCloseIdleConnections) {
  http::HttpLimits limits;
  limits.caps = {.max_connections = 1024, .max_per_address = 0, .evict_idle = true};
  limits.handshake_timeout = 2s;
  limits.header_timeout = 2s;
  start(limits);
  open_idle_tcp(kIdleTcp);
  open_idle_tls(kIdleTls);
  const auto opened = Clock::now();
  // The newest is still open a moment later: closed by its timeout, not at once.
  EXPECT_FALSE(closed_by(tls_conns_.back()->next_layer().native_handle(), opened + 700ms));
  expect_real_request_served(5s);
  EXPECT_EQ(count_closed(opened + 6s), kIdleTcp + kIdleTls);
  EXPECT_EQ(server_->evicted_connections(), 0u);
  const auto deadline = Clock::now() + 3s;
  while (server_->open_connections() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);  // polling a count with a deadline
  EXPECT_EQ(server_->open_connections(), 0u);
}

// Keep-alive: after a response the connection may wait idle_timeout for the next request; a
// request whose headers stop half-way is closed after header_timeout.
TEST_F(HttpLimitsTest, KeepAliveIdleAndPartialHeadersTimeOut) {
  http::HttpLimits limits;
  limits.header_timeout = 1500ms;
  limits.idle_timeout = 1500ms;
  start(limits);
  // One keep-alive request, then silence.
  beast::ssl_stream<tcp::socket> keep(ioc_, client_ctx_);
  keep.next_layer().connect(endpoint());
  keep.handshake(ssl::stream_base::client);
  bhttp::request<bhttp::string_body> req(bhttp::verb::get, "/api/health", 11);
  req.set(bhttp::field::host, "coordinator");
  req.keep_alive(true);
  bhttp::write(keep, req);
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(keep, buf, res);
  ASSERT_EQ(res.result_int(), 200u);
  ASSERT_TRUE(res.keep_alive());
  const auto answered = Clock::now();
  // A slow client: the request line and half a header, never finished.
  beast::ssl_stream<tcp::socket> slow(ioc_, client_ctx_);
  slow.next_layer().connect(endpoint());
  slow.handshake(ssl::stream_base::client);
  net::write(slow, net::buffer(std::string("GET /api/health HTTP/1.1\r\nHost: coord")));
  const auto started = Clock::now();

  EXPECT_FALSE(closed_by(keep.next_layer().native_handle(), answered + 700ms));
  EXPECT_TRUE(closed_by(keep.next_layer().native_handle(), answered + 4s));
  EXPECT_TRUE(closed_by(slow.next_layer().native_handle(), started + 4s));
  EXPECT_GT(Clock::now() - started, 1s);
}

// A cap of 0 connections would refuse everyone: refused with one line at start.
TEST_F(HttpLimitsTest, ConnectionCapMustBePositive) {
  http::HttpLimits limits;
  limits.caps.max_connections = 0;
  http::HttpOptions ho;
  ho.tls_dir = tls_;
  ho.limits = limits;
  auto server = http::HttpServer::start(*manager_, *store_, ho);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("connection cap"), std::string::npos);
}

}  // namespace
}  // namespace atl::coordinator
