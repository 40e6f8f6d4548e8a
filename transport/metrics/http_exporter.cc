#include "transport/metrics/http_exporter.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "transport/host_port.h"
#include "transport/metrics/registry.h"

namespace atl::transport::metrics {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto kReadTimeout = std::chrono::seconds(10);
constexpr auto kWriteTimeout = std::chrono::seconds(10);
constexpr uint32_t kHeaderLimit = 8 * 1024;
constexpr uint32_t kMaxConnections = 16;

struct Shared {
  std::function<std::string()> render;
  std::atomic<uint32_t> connections{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {
    ++shared_.connections;
  }
  ~Session() { --shared_.connections; }

  void run() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(0);
    stream_.expires_after(kReadTimeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

 private:
  void on_read(beast::error_code ec, size_t) {
    if (ec == bhttp::error::header_limit)
      return answer(bhttp::status::request_header_fields_too_large, "request headers too large\n");
    if (ec == bhttp::error::body_limit || ec == bhttp::error::unexpected_body)
      return answer(bhttp::status::payload_too_large, "requests carry no body here\n");
    if (ec && ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category())
      return answer(bhttp::status::bad_request, "malformed HTTP request\n");
    if (ec) return close();  // timeout, reset, end of stream
    const auto& req = parser_->get();
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (req.method() != bhttp::verb::get)
      return answer(bhttp::status::method_not_allowed, "use GET /metrics\n");
    if (path != "/metrics") return answer(bhttp::status::not_found, "only /metrics is served\n");
    answer(bhttp::status::ok, shared_.render(), kContentType);
  }

  void answer(bhttp::status status, std::string body,
              const char* content_type = "text/plain; charset=utf-8") {
    auto msg = std::make_shared<bhttp::response<bhttp::string_body>>(status, 11);
    msg->set(bhttp::field::server, "atoll");
    msg->set(bhttp::field::content_type, content_type);
    msg->set(bhttp::field::cache_control, "no-store");
    if (status == bhttp::status::method_not_allowed) msg->set(bhttp::field::allow, "GET");
    msg->keep_alive(false);
    msg->body() = std::move(body);
    msg->prepare_payload();
    stream_.expires_after(kWriteTimeout);
    bhttp::async_write(stream_, *msg, [self = shared_from_this(), msg](beast::error_code, size_t) {
      self->close();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> parser_;
};

// HOST:PORT → (address, port); [v6]:PORT and localhost accepted.
StatusOr<tcp::endpoint> parse_listen(const std::string& listen, const std::string& flag) {
  ATOLL_ASSIGN_OR_RETURN(HostPort hp,
                         parse_host_port(listen, flag, PortZero::kAllowed, "10.0.0.5:9464"));
  std::string& host = hp.host;
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  const auto addr = net::ip::make_address(host, ec);
  if (ec)
    return InvalidArgument(flag + " " + listen + ": the host must be an IP address or localhost");
  return tcp::endpoint(addr, hp.port);
}

}  // namespace

struct HttpExporter::Impl {
  Impl() : acceptor(ioc) {}

  void do_accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        if (shared.connections.load() >= kMaxConnections) {
          beast::error_code ignored;
          s.close(ignored);
        } else {
          std::make_shared<Session>(std::move(s), shared)->run();
        }
      }
      do_accept();
    });
  }

  std::string host;
  int port = 0;
  std::mutex stop_mu;
  bool stopped = false;
  // Destroyed in reverse order: the thread, the acceptor, the io_context (and every session),
  // then what the sessions share.
  Shared shared;
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::thread worker;
};

HttpExporter::HttpExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpExporter::~HttpExporter() {
  shutdown();
}

int HttpExporter::port() const {
  return impl_->port;
}

std::string HttpExporter::url() const {
  std::string host = impl_->host;
  if (host == "0.0.0.0" || host == "::") host = "localhost";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(impl_->port) + "/metrics";
}

void HttpExporter::shutdown() {
  std::lock_guard<std::mutex> lk(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->ioc.stop();
  if (impl_->worker.joinable()) impl_->worker.join();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::start(const std::string& listen,
                                                            std::function<std::string()> render,
                                                            const std::string& flag) {
  ATOLL_ASSIGN_OR_RETURN(const tcp::endpoint ep, parse_listen(listen, flag));
  auto impl = std::make_unique<Impl>();
  impl->shared.render = std::move(render);
  impl->host = ep.address().to_string();
  beast::error_code ec;
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable(flag + " " + listen + ": cannot listen: " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  raw->do_accept();
  raw->worker = std::thread([raw] { raw->ioc.run(); });
  return std::unique_ptr<HttpExporter>(new HttpExporter(std::move(impl)));
}

}  // namespace atl::transport::metrics
