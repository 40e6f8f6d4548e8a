#include "coordinator/http/server.h"

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "coordinator/http/api.h"
#include "transport/host_port.h"
#include "transport/tls/ca.h"

namespace atl::coordinator::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {

constexpr auto kBodyTimeout = std::chrono::seconds(30);
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr auto kDrainTimeout = std::chrono::seconds(2);
constexpr auto kPingInterval = std::chrono::seconds(15);
constexpr size_t kMaxQueued = 1024;
constexpr size_t kFirstReadBytes = 4096;
constexpr uint32_t kHeaderLimit = 16 * 1024;
constexpr uint64_t kMaxDrainBytes = 64u << 20;

// Headers every response carries, event streams included (docs/dashboard.md): the streams are
// written by hand, so both writers take them from here.
constexpr std::pair<const char*, const char*> kSecurityHeaders[] = {
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"Strict-Transport-Security", "max-age=31536000"},
    {"Content-Security-Policy",
     "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
     "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"},
};

class Session;

// What every connection shares; outlives all sessions (see Impl's member order).
struct Shared {
  Shared(ExperimentManager& m, Store& s, HttpOptions o)
      : api(m, s, o.mounts, o.metrics), options(std::move(o)), table(options.limits.caps) {}
  Api api;
  HttpOptions options;
  transport::ConnectionTable table;
  std::mutex subs_mu;
  std::map<uint64_t, std::weak_ptr<Session>> subs;  // event-stream sessions
  uint64_t next_sub = 1;
};

bool is_parse_error(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, ssl::context& ctx, Shared& shared)
      : stream_(std::move(socket), ctx), shared_(shared), ping_(stream_.get_executor()) {}
  ~Session() {
    shared_.table.remove(table_id_);
    if (sub_id_) {
      std::lock_guard<std::mutex> lk(shared_.subs_mu);
      shared_.subs.erase(sub_id_);
    }
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // Before run(): the connection's entry in the connection table.
  void set_table_id(transport::ConnectionTable::Id id) { table_id_ = id; }

  // From any thread: closes the connection (to make room for a new one).
  static void evict(const std::weak_ptr<Session>& weak) {
    if (auto s = weak.lock()) net::post(s->executor(), [s] { s->close_now(); });
  }

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::on_run, shared_from_this()));
  }

  // From any thread: ends this session if it is an event stream opened with the token whose
  // hash is `token_hash` (the token was just revoked).
  static void end_if_opened_by(const std::weak_ptr<Session>& weak, const std::string& token_hash) {
    if (auto s = weak.lock())
      net::post(s->executor(), [s, token_hash] {
        if (s->streaming_ && s->token_hash_ == token_hash) s->close_now();
      });
  }

  // On the session's strand: queue one event for an event-stream session.
  void push(const ManagerEvent& e) {
    if (!streaming_ || closed_) return;
    if (!filter_.empty() && e.experiment_id != filter_) return;
    enqueue("event: " + e.kind + "\ndata: {\"experiment\":\"" + e.experiment_id +
            "\",\"data\":" + e.json + "}\n\n");
  }

 private:
  void on_run() {
    beast::get_lowest_layer(stream_).expires_after(shared_.options.limits.handshake_timeout);
    stream_.async_handshake(ssl::stream_base::server,
                            beast::bind_front_handler(&Session::on_handshake, shared_from_this()));
  }

  void on_handshake(beast::error_code ec) {
    if (ec || closed_) return;  // not TLS, TLS < 1.3, timeout, evicted: nothing to answer
    read_header();
  }

  // Keep-alive: waits up to idle_timeout for the next request's first byte (idle: evictable),
  // then reads its headers.
  void await_next_request() {
    shared_.table.set_idle(table_id_, true);
    if (buffer_.size() > 0) return read_header();  // pipelined: already here
    beast::get_lowest_layer(stream_).expires_after(shared_.options.limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kFirstReadBytes),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec || self->closed_) return;  // closed, timeout or evicted
                              self->buffer_.commit(n);
                              self->read_header();
                            });
  }

  // The request line and headers within header_timeout (the connection stays evictable until
  // they are in), then the body within kBodyTimeout.
  void read_header() {
    parser_.emplace();
    parser_->body_limit(shared_.options.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    beast::get_lowest_layer(stream_).expires_after(shared_.options.limits.header_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    if (closed_) return;
    if (ec) return on_read(ec, 0);
    shared_.table.set_idle(table_id_, false);
    if (parser_->is_done()) return on_read({}, 0);
    beast::get_lowest_layer(stream_).expires_after(kBodyTimeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (closed_) return;
    if (ec == bhttp::error::end_of_stream) return do_close();
    if (ec == bhttp::error::body_limit)
      return send(Api::error(413, "request body larger than " +
                                      std::to_string(shared_.options.max_body_bytes) + " bytes"),
                  false, true);
    if (ec == bhttp::error::header_limit)
      return send(
          Api::error(431, "request headers larger than " + std::to_string(kHeaderLimit) + " bytes"),
          false, true);
    if (ec && is_parse_error(ec))
      return send(Api::error(400, "malformed HTTP request: " + ec.message()), false, true);
    if (ec) return;  // timeout, reset, TLS error
    auto req = parser_->release();
    // HEAD: the API answers it as GET; only the headers are sent (RFC 9110 §9.3.2).
    const bool head = req.method() == bhttp::verb::head;
    Request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.authorization = std::string(req[bhttp::field::authorization]);
    r.accept_encoding = std::string(req[bhttp::field::accept_encoding]);
    r.if_none_match = std::string(req[bhttp::field::if_none_match]);
    r.body = std::move(req.body());
    Response res = shared_.api.handle(r);
    if (res.stream && head) {
      // A stream's headers, without starting it.
      Response headers;
      headers.content_type = "text/event-stream";
      headers.headers.emplace_back("Cache-Control", "no-store");
      return send(std::move(headers), false, false, true);
    }
    if (res.stream) return start_stream(*res.stream, res.stream_token_hash);
    send(std::move(res), req.keep_alive(), false, head);
  }

  // `head_only`: the answer to a HEAD request, the GET answer's headers (its Content-Length
  // too) without the body.
  void send(Response res, bool keep_alive, bool drain, bool head_only = false) {
    auto msg = std::make_shared<bhttp::response<bhttp::string_body>>();
    msg->version(11);
    msg->result(res.status);
    msg->set(bhttp::field::server, "atoll");
    msg->set(bhttp::field::content_type, res.content_type);
    for (const auto& [name, value] : kSecurityHeaders) msg->set(name, value);
    for (const auto& [k, v] : res.headers) msg->set(k, v);
    const size_t body_bytes = res.body.size();
    if (!head_only) msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive);
    msg->prepare_payload();
    if (head_only) msg->content_length(body_bytes);
    beast::get_lowest_layer(stream_).expires_after(kWriteTimeout);
    bhttp::async_write(
        stream_, *msg,
        [self = shared_from_this(), msg, keep_alive, drain](beast::error_code ec, size_t) {
          if (ec) return;
          if (drain) return self->do_drain(0);
          if (!keep_alive) return self->do_close();
          self->await_next_request();
        });
  }

  // After refusing a request whose body was not read: read and discard what the client is still
  // sending (bounded in bytes and time), so that closing does not reset the connection before
  // the client has read the answer.
  void do_drain(uint64_t total) {
    if (total > kMaxDrainBytes) return do_close();
    if (total == 0) beast::get_lowest_layer(stream_).expires_after(kDrainTimeout);
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this(), total](beast::error_code ec, size_t n) {
                              if (ec) return self->do_close();
                              self->do_drain(total + n);
                            });
  }

  void do_close() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(2));
    stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
      beast::error_code ignored;
      beast::get_lowest_layer(self->stream_).socket().close(ignored);
    });
  }

  void start_stream(const std::string& filter, const std::string& token_hash) {
    streaming_ = true;
    beast::get_lowest_layer(stream_).expires_never();
    filter_ = filter;
    token_hash_ = token_hash;
    {
      std::lock_guard<std::mutex> lk(shared_.subs_mu);
      sub_id_ = shared_.next_sub++;
      shared_.subs[sub_id_] = weak_from_this();
    }
    std::string head =
        "HTTP/1.1 200 OK\r\nServer: atoll\r\nContent-Type: text/event-stream\r\n"
        "Cache-Control: no-store\r\n";
    for (const auto& [name, value] : kSecurityHeaders)
      head.append(name).append(": ").append(value).append("\r\n");
    head += "Connection: close\r\n\r\nretry: 2000\n: connected\n\n";
    enqueue(std::move(head));
    schedule_ping();
  }

  void schedule_ping() {
    ping_.expires_after(kPingInterval);
    ping_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      self->enqueue(": ping\n\n");
      self->schedule_ping();
    });
  }

  void enqueue(std::string msg) {
    if (closed_) return;
    if (queue_.size() >= kMaxQueued) return close_now();  // a client that does not read
    queue_.push_back(std::move(msg));
    if (!writing_) write_next();
  }

  void write_next() {
    writing_ = true;
    beast::get_lowest_layer(stream_).expires_after(kWriteTimeout);
    net::async_write(stream_, net::buffer(queue_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->close_now();
                       self->queue_.pop_front();
                       beast::get_lowest_layer(self->stream_).expires_never();
                       if (!self->queue_.empty()) self->write_next();
                     });
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    ping_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().close(ignored);
  }

  beast::ssl_stream<beast::tcp_stream> stream_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::array<char, 16384> scratch_{};
  // Event stream.
  net::steady_timer ping_;
  bool streaming_ = false;
  bool closed_ = false;
  bool writing_ = false;
  std::string filter_;
  std::string token_hash_;  // of the token that opened the stream
  std::deque<std::string> queue_;
  uint64_t sub_id_ = 0;
  transport::ConnectionTable::Id table_id_ = 0;
};

}  // namespace

struct HttpServer::Impl {
  Impl(ExperimentManager& m, Store& s, HttpOptions o)
      : manager(m), shared(m, s, std::move(o)), ctx(ssl::context::tls_server), acceptor(ioc) {}

  void do_accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) admit(std::move(socket));
      do_accept();
    });
  }

  // A new connection takes a place in the table, closing the longest idle one when over a cap;
  // refused (closed at once) when every connection is busy.
  void admit(tcp::socket socket) {
    beast::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    // Small answers go out at once: with Nagle's algorithm a reply written in two pieces (TLS
    // record, then the rest) waited for the browser's delayed ACK, about 40 ms each.
    socket.set_option(tcp::no_delay(true), ec);
    net::ip::address address = peer.address();
    if (address.is_v6() && address.to_v6().is_v4_mapped())
      address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
    auto session = std::make_shared<Session>(std::move(socket), ctx, shared);
    auto admission = shared.table.admit(
        address.to_string(), [weak = std::weak_ptr<Session>(session)] { Session::evict(weak); });
    for (auto& close : admission.evicted) close();
    if (admission.id == 0) return;  // refused: the session's socket closes with it
    session->set_table_id(admission.id);
    session->run();
  }

  // A revoked token's event streams end (each session checks on its own strand).
  void end_streams_of(const std::string& token_hash) {
    std::vector<std::weak_ptr<Session>> streams;
    {
      std::lock_guard<std::mutex> lk(shared.subs_mu);
      for (auto& [id, weak] : shared.subs) streams.push_back(weak);
    }
    for (auto& weak : streams) Session::end_if_opened_by(weak, token_hash);
  }

  void broadcast(const ManagerEvent& e) {
    // Sessions are collected under the lock and used outside it: the last reference may be
    // dropped here, and a session's destructor takes the same lock.
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lk(shared.subs_mu);
      for (auto& [id, weak] : shared.subs)
        if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) net::post(s->executor(), [s, e] { s->push(e); });
  }

  ExperimentManager& manager;
  uint64_t listener_id = 0;
  std::string host;
  int port = 0;
  bool stopped = false;
  std::mutex stop_mu;
  // Destroyed in reverse order: workers, acceptor, io_context (and with it every session), the
  // TLS context, then what sessions share.
  Shared shared;
  ssl::context ctx;
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::vector<std::thread> workers;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  shutdown();
}

int HttpServer::port() const {
  return impl_->port;
}

size_t HttpServer::open_connections() const {
  return impl_->shared.table.size();
}

size_t HttpServer::open_connections(const std::string& address) const {
  return impl_->shared.table.count(address);
}

uint64_t HttpServer::evicted_connections() const {
  return impl_->shared.table.evictions();
}

uint64_t HttpServer::refused_connections() const {
  return impl_->shared.table.refusals();
}

std::string HttpServer::url() const {
  std::string host = impl_->host;
  if (host == "0.0.0.0" || host == "::") host = "localhost";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "https://" + host + ":" + std::to_string(impl_->port) + "/";
}

void HttpServer::shutdown() {
  std::lock_guard<std::mutex> lk(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->manager.unsubscribe(impl_->listener_id);
  impl_->ioc.stop();
  for (auto& t : impl_->workers)
    if (t.joinable()) t.join();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::start(ExperimentManager& manager, Store& store,
                                                        HttpOptions options) {
  ATOLL_ASSIGN_OR_RETURN(
      transport::HostPort hp,
      transport::parse_host_port(options.listen, "--http", transport::PortZero::kAllowed,
                                 "127.0.0.1:8443"));
  if (hp.host == "localhost") hp.host = "127.0.0.1";
  if (options.threads < 1) options.threads = 1;
  if (options.limits.caps.max_connections < 1)
    return InvalidArgument("dashboard: the connection cap must be at least 1");
  const std::string cert = transport::cert_path(options.tls_dir, options.cert_name);
  const std::string key = transport::key_path(options.tls_dir, options.cert_name);
  auto impl = std::make_unique<Impl>(manager, store, std::move(options));
  impl->host = hp.host;

  // TLS 1.3 only, the coordinator's server certificate.
  beast::error_code ec;
  impl->ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                        ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                        ssl::context::no_tlsv1_2);
  if (SSL_CTX_set_min_proto_version(impl->ctx.native_handle(), TLS1_3_VERSION) != 1)
    return Internal("dashboard: cannot require TLS 1.3");
  impl->ctx.use_certificate_chain_file(cert, ec);
  if (ec)
    return InvalidArgument("dashboard: cannot load certificate " + cert + " (" + ec.message() +
                           "); issue it with `atoll ca issue --role server`");
  impl->ctx.use_private_key_file(key, ssl::context::pem, ec);
  if (ec) return InvalidArgument("dashboard: cannot load key " + key + " (" + ec.message() + ")");

  const auto addr = net::ip::make_address(hp.host, ec);
  if (ec)
    return InvalidArgument("--http " + impl->shared.options.listen +
                           ": the host must be an IP address or localhost");
  const tcp::endpoint ep(addr, hp.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec == net::error::address_in_use)
    return Unavailable("dashboard: port " + impl->shared.options.listen +
                       " is already in use by another process; stop it or choose another --http");
  if (ec)
    return Unavailable("dashboard: cannot listen on " + impl->shared.options.listen + ": " +
                       ec.message());
  impl->port = impl->acceptor.local_endpoint().port();

  Impl* raw = impl.get();
  raw->shared.api.on_token_revoked([raw](const std::string& hash) { raw->end_streams_of(hash); });
  impl->listener_id = manager.subscribe([raw](const ManagerEvent& e) { raw->broadcast(e); });
  impl->do_accept();
  for (int i = 0; i < impl->shared.options.threads; ++i)
    impl->workers.emplace_back([raw] { raw->ioc.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace atl::coordinator::http
