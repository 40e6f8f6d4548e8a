// The plain-HTTP /metrics listener (transport/metrics/http_exporter.h) over a real socket: what it
// answers to a scrape, and how it refuses everything else.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <string>

#include "transport/metrics/http_exporter.h"
#include "transport/metrics/registry.h"

namespace atl::transport::metrics {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Sends `request` as is and reads until the server closes the connection.
std::string round_trip(int port, const std::string& request) {
  net::io_context ioc;
  tcp::socket s(ioc);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  net::write(s, net::buffer(request));
  std::string reply;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    const size_t n = s.read_some(net::buffer(buf), ec);
    reply.append(buf, n);
    if (ec) break;
  }
  return reply;
}

std::string status_line(const std::string& reply) {
  return reply.substr(0, reply.find("\r\n"));
}

class MetricsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.counter("t_scrapes_total", "Scrapes.");
    auto e = HttpExporter::start("127.0.0.1:0", [this] {
      registry_.counter("t_scrapes_total", "Scrapes.").add();
      return registry_.render();
    });
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    exporter_ = std::move(e).value();
  }
  Registry registry_;
  std::unique_ptr<HttpExporter> exporter_;
};

TEST_F(MetricsHttp, GetMetricsAnswersTheTextFormat) {
  const std::string reply =
      round_trip(exporter_->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(reply), "HTTP/1.1 200 OK") << reply;
  EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << reply;
  EXPECT_NE(reply.find("Connection: close\r\n"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\r\n\r\n# HELP t_scrapes_total Scrapes.\n# TYPE t_scrapes_total counter\n"
                       "t_scrapes_total 1\n"),
            std::string::npos)
      << reply;
  // A query string is ignored; each scrape renders anew.
  EXPECT_NE(round_trip(exporter_->port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
                .find("t_scrapes_total 2\n"),
            std::string::npos);
  EXPECT_EQ(exporter_->url(), "http://127.0.0.1:" + std::to_string(exporter_->port()) + "/metrics");
}

TEST_F(MetricsHttp, RefusesOtherMethodsPathsBodiesAndHugeHeaders) {
  const int port = exporter_->port();
  const std::string post =
      round_trip(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(status_line(post), "HTTP/1.1 405 Method Not Allowed") << post;
  EXPECT_NE(post.find("Allow: GET\r\n"), std::string::npos) << post;
  EXPECT_EQ(status_line(round_trip(port, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")),
            "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(round_trip(port,
                                   "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                   "5\r\n\r\nhello")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(status_line(round_trip(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                             std::string(9000, 'a') + "\r\n\r\n")),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(status_line(round_trip(port, "NOT HTTP AT ALL\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  // None of these rendered the metrics.
  EXPECT_EQ(registry_.counter("t_scrapes_total", "Scrapes.").value(), 0);
}

TEST(MetricsHttpStart, BadAddressesAreOneLine) {
  auto bad = HttpExporter::start("nonsense", [] { return std::string(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--metrics nonsense: expected HOST:PORT"),
            std::string::npos)
      << bad.status().message();
  auto host = HttpExporter::start("example.org:9464", [] { return std::string(); });
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("IP address or localhost"), std::string::npos);
  auto first = HttpExporter::start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  auto taken = HttpExporter::start("127.0.0.1:" + std::to_string((*first)->port()),
                                   [] { return std::string(); });
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find("cannot listen"), std::string::npos);
}

}  // namespace
}  // namespace atl::transport::metrics
