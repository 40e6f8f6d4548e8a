#include "transport/bulk_lane.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/payload_digest.h"
#include "transport/tensor_stream.h"
#include "transport/tls/openssl_util.h"
#include "transport/tls/tls_socket.h"

namespace atl::transport {

namespace pb = atoll_pb::v1;
using tls_socket::SslCtxPtr;
using tls_socket::SslPtr;

namespace {

using Clock = std::chrono::steady_clock;

// A reply's code byte is atl::StatusCode: its numbering is wire format (docs/protocol.md).
static_assert(static_cast<int>(StatusCode::kOk) == 0 &&
              static_cast<int>(StatusCode::kInvalidArgument) == 1 &&
              static_cast<int>(StatusCode::kPermissionDenied) == 6 &&
              static_cast<int>(StatusCode::kUnavailable) == 8 &&
              static_cast<int>(StatusCode::kDataLoss) == 10 &&
              static_cast<int>(StatusCode::kIoError) == 12);
// ALPN: a gRPC client dialing the lane's port (or a lane client dialing gRPC's) fails its
// handshake instead of talking past the server.
constexpr unsigned char kAlpn[] = {10, 'a', 't', 'o', 'l', 'l', '-', 'b', 'u', 'l', 'k'};

// Why an SSL read or write failed, in a few words.
std::string io_failure(SSL* ssl, int rc, std::chrono::milliseconds stall) {
  const int saved_errno = errno;
  const tls_socket::SslFailure f = tls_socket::ssl_failure(ssl, rc, saved_errno);
  if (f.timed_out) return "no byte moved for " + std::to_string(stall.count()) + " ms";
  return f.detail;
}

// Pieces a hashed payload is written in: each is hashed just before OpenSSL copies it into its
// records, while it is in cache.
constexpr size_t kHashedWriteBytes = 256 << 10;

// Where a piece of a payload lies in it, for messages: `before` bytes precede it, of `total`
// (0: the piece is the whole).
struct PieceOf {
  size_t before = 0;
  size_t total = 0;
};

// Writes all of `data`; with a hasher, hashes it as it goes.
Status write_all(SSL* ssl, std::string_view data, std::chrono::milliseconds stall,
                 const std::string& what, PayloadHasher* hasher = nullptr, PieceOf of = {}) {
  size_t done = 0;
  while (done < data.size()) {
    size_t wrote = 0;
    const size_t piece =
        hasher ? std::min(kHashedWriteBytes, data.size() - done) : data.size() - done;
    if (hasher) hasher->update(data.data() + done, piece);
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write_ex(ssl, data.data() + done, piece, &wrote);
    // Without SSL_MODE_ENABLE_PARTIAL_WRITE a successful write wrote the whole piece.
    if (rc == 1 && wrote != piece) rc = 0;
    if (rc != 1)
      return Unavailable(what + ": sending failed after " + std::to_string(of.before + done) +
                         " of " + std::to_string(of.total ? of.total : data.size()) + " bytes (" +
                         io_failure(ssl, rc, stall) + ")");
    done += wrote;
  }
  return Status::Ok();
}

// Reads exactly `n` bytes; with a hasher, hashes each piece as it lands (while in cache).
Status read_all(SSL* ssl, char* data, size_t n, std::chrono::milliseconds stall,
                const std::string& what, PayloadHasher* hasher = nullptr, PieceOf of = {}) {
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    ERR_clear_error();
    errno = 0;
    const int rc = SSL_read_ex(ssl, data + done, n - done, &got);
    if (rc != 1)
      return Unavailable(what + ": the connection ended after " + std::to_string(of.before + done) +
                         " of " + std::to_string(of.total ? of.total : n) + " bytes (" +
                         io_failure(ssl, rc, stall) + ")");
    if (hasher) hasher->update(data + done, got);
    done += got;
  }
  return Status::Ok();
}

// For the server's first phase on a non-blocking socket: waits until the SSL call that returned
// `rc` can go on, at most until `deadline`; false when it cannot (an error, or time is up).
bool wait_to_retry(SSL* ssl, int rc, Clock::time_point deadline) {
  const int kind = SSL_get_error(ssl, rc);
  if (kind != SSL_ERROR_WANT_READ && kind != SSL_ERROR_WANT_WRITE) return false;
  const int left = tls_socket::millis_left(deadline);
  if (left <= 0) return false;
  pollfd p{SSL_get_fd(ssl), static_cast<short>(kind == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
  return ::poll(&p, 1, left) > 0;
}

// The handshake, before `deadline`; the socket is non-blocking.
bool accept_by(SSL* ssl, Clock::time_point deadline) {
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_accept(ssl);
    if (rc == 1) return true;
    if (!wait_to_retry(ssl, rc, deadline)) return false;
  }
}

// `n` bytes, all before `deadline` (a client that sends a byte now and then cannot stretch it);
// the socket is non-blocking.
bool read_by(SSL* ssl, char* data, size_t n, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    ERR_clear_error();
    const int rc = SSL_read_ex(ssl, data + done, n - done, &got);
    if (rc == 1) {
      done += got;
      continue;
    }
    if (!wait_to_retry(ssl, rc, deadline)) return false;
  }
  return true;
}

// What a client's transfer asks between its segments: nothing stops it.
Status always_admitted() {
  return Status::Ok();
}

// `admitted`'s verdict; when it refuses, the connection is reset on close (SO_LINGER 0), so the
// bytes still queued in the kernel for the peer are dropped instead of delivered.
Status still_admitted(SSL* ssl, const std::function<Status()>& admitted) {
  Status st = admitted();
  if (!st.ok()) {
    const linger reset{1, 0};
    (void)::setsockopt(SSL_get_fd(ssl), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  }
  return st;
}

// A payload and its trailer, the payload's XXH3-128 (hashed on the way unless `digest` is
// already known: kPayloadDigestBytes bytes, or empty). `admitted` is asked between every
// kAdmissionCheckBytes.
Status send_payload(SSL* ssl, std::string_view payload, const std::string& digest,
                    std::chrono::milliseconds stall, const std::string& what,
                    const std::function<Status()>& admitted = always_admitted) {
  const bool known = digest.size() == kPayloadDigestBytes;
  PayloadHasher hasher;
  for (size_t off = 0; off < payload.size(); off += kAdmissionCheckBytes) {
    if (off > 0) ATOLL_RETURN_IF_ERROR(still_admitted(ssl, admitted));
    ATOLL_RETURN_IF_ERROR(write_all(ssl, payload.substr(off, kAdmissionCheckBytes), stall, what,
                                    known ? nullptr : &hasher, {off, payload.size()}));
  }
  return write_all(ssl, known ? digest : hasher.finish(), stall, what);
}

// `payload->size()` bytes into *payload, hashed as they land, then the trailer: DataLoss when
// they differ. Returns the digest in *digest.
Status receive_payload(SSL* ssl, std::string* payload, std::chrono::milliseconds stall,
                       const std::string& what, std::string* digest,
                       const std::function<Status()>& admitted = always_admitted) {
  PayloadHasher hasher;
  for (size_t off = 0; off < payload->size(); off += kAdmissionCheckBytes) {
    if (off > 0) ATOLL_RETURN_IF_ERROR(still_admitted(ssl, admitted));
    ATOLL_RETURN_IF_ERROR(read_all(ssl, payload->data() + off,
                                   std::min(kAdmissionCheckBytes, payload->size() - off), stall,
                                   what, &hasher, {off, payload->size()}));
  }
  char trailer[kPayloadDigestBytes];
  ATOLL_RETURN_IF_ERROR(read_all(ssl, trailer, sizeof(trailer), stall, what));
  *digest = hasher.finish();
  if (std::string_view(trailer, sizeof(trailer)) != *digest)
    return DataLoss(what + ": the payload's XXH3-128 does not match the one sent after it");
  return Status::Ok();
}

// One frame: its kind byte and body.
Status read_frame(SSL* ssl, const char (&magic)[4], std::chrono::milliseconds stall,
                  const std::string& what, uint8_t* kind, std::string* body) {
  char head[kBulkFrameHeadBytes];
  ATOLL_RETURN_IF_ERROR(read_all(ssl, head, sizeof(head), stall, what));
  uint32_t length = 0;
  ATOLL_RETURN_IF_ERROR(parse_bulk_frame_head(head, magic, what, kind, &length));
  body->assign(length, '\0');
  return read_all(ssl, body->data(), body->size(), stall, what);
}

bool known_code(uint8_t code) {
  return code <= static_cast<uint8_t>(StatusCode::kIoError);
}

std::string error_reply(const Status& st) {
  std::string message = st.message();
  if (message.size() > kMaxBulkMessageBytes) message.resize(kMaxBulkMessageBytes);
  return bulk_frame(kBulkReplyMagic, static_cast<uint8_t>(st.code()), message);
}

int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void*) {
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, kAlpn, sizeof(kAlpn), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

StatusOr<SslCtxPtr> server_context(const TlsIdentity& tls) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1)
    return Internal("bulk lane: cannot set up TLS: " + ossl::last_error());
  ATOLL_ASSIGN_OR_RETURN(ossl::X509Ptr cert,
                         ossl::parse_certificate_pem(tls.cert_pem, "server certificate"));
  ATOLL_ASSIGN_OR_RETURN(ossl::PkeyPtr key, ossl::parse_private_key_pem(tls.key_pem, "server key"));
  if (SSL_CTX_use_certificate(ctx.get(), cert.get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return InvalidArgument("bulk lane: the server key does not match its certificate: " +
                           ossl::last_error());
  if (tls_socket::add_ca_certificates(SSL_CTX_get_cert_store(ctx.get()), tls.ca_pem) == 0)
    return InvalidArgument("bulk lane: no CA certificate to verify clients with");
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_num_tickets(ctx.get(), 0);  // one transfer per connection: nothing to resume
  SSL_CTX_set_alpn_select_cb(ctx.get(), select_alpn, nullptr);
  return ctx;
}

}  // namespace

// ---------------------------------------------------------------------------------- server --

StatusOr<std::unique_ptr<BulkLaneServer>> BulkLaneServer::start(BulkLaneOptions options,
                                                                BulkHandler& handler) {
  if (options.handshake_timeout.count() < 1 || options.stall_timeout.count() < 1)
    return InvalidArgument("bulk lane: the handshake and stall timeouts must be positive");
  ATOLL_ASSIGN_OR_RETURN(SslCtxPtr ctx, server_context(options.tls));
  std::unique_ptr<BulkLaneServer> s(new BulkLaneServer(options, handler));
  s->ssl_ctx_ =
      std::shared_ptr<void>(ctx.release(), [](void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); });
  ATOLL_ASSIGN_OR_RETURN(s->listener_,
                         CappedListener::bind(options.listen, options.caps, "--bulk-listen"));
  s->listener_->attach([raw = s.get()](int fd) { raw->hand_over(fd); });
  if (options.refusal_log) s->listener_->set_refusal_log(options.refusal_log);
  s->listener_->start();
  return s;
}

void BulkLaneServer::hand_over(int fd) {
  std::lock_guard<std::mutex> lk(mu_);
  reap_finished_locked();
  if (stopping_) {
    ::close(fd);
    return;
  }
  const uint64_t id = next_id_++;
  active_fds_[id] = fd;
  threads_[id] = std::thread([this, id, fd] { serve(id, fd); });
}

void BulkLaneServer::reap_finished_locked() {
  for (uint64_t id : finished_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    if (it->second.joinable()) it->second.join();
    threads_.erase(it);
  }
  finished_.clear();
}

void BulkLaneServer::serve(uint64_t id, int fd) {
  const tls_socket::SigpipeBlock no_sigpipe;
  const auto stall = options_.stall_timeout;
  SslPtr ssl(SSL_new(static_cast<SSL_CTX*>(ssl_ctx_.get())));
  // The handshake and the request must come within the handshake timeout: a connection that
  // says nothing (or a byte now and then) holds a thread and a place under the caps only that
  // long. The descriptor is non-blocking until then.
  const auto deadline = Clock::now() + options_.handshake_timeout;
  char head[kBulkFrameHeadBytes];
  const bool greeted = ssl && SSL_set_fd(ssl.get(), fd) == 1 && accept_by(ssl.get(), deadline) &&
                       read_by(ssl.get(), head, sizeof(head), deadline);
  ossl::last_error();
  if (greeted) {
    SSL* s = ssl.get();
    // Blocking from here on (set below, before any reply is written).
    auto reply = [&](const Status& st) { (void)write_all(s, error_reply(st), stall, "reply"); };
    // The certificate OpenSSL verified against the CA (SSL_VERIFY_FAIL_IF_NO_PEER_CERT).
    StatusOr<PeerIdentity> peer = Unauthenticated("no client certificate");
    if (X509* cert = SSL_get0_peer_certificate(s); cert != nullptr) {
      auto pem = ossl::certificate_to_pem(cert);
      peer = pem.ok() ? peer_identity_from_pem(*pem) : StatusOr<PeerIdentity>(pem.status());
    }
    uint8_t op = 0;
    uint32_t body_bytes = 0;
    std::string body;
    Status st =
        parse_bulk_frame_head(head, kBulkRequestMagic, "bulk lane request", &op, &body_bytes);
    if (st.ok()) body.assign(body_bytes, '\0');
    if (st.ok() && !read_by(s, body.data(), body.size(), deadline))
      st = Status(StatusCode::kDeadlineExceeded,
                  "bulk lane request: its " + std::to_string(body.size()) +
                      " bytes did not arrive within the handshake timeout");
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tls_socket::set_io_timeout(fd, stall);
    if (st.ok() && !peer.ok()) st = peer.status();
    StatusOr<BulkRequest> request = st.ok() ? decode_bulk_request(op, body) : st;
    const std::function<Status()> admitted = [this, &peer] {
      return handler_.still_admitted(*peer);
    };
    if (!request.ok()) {
      reply(request.status());
    } else if (request->op == kBulkPull) {
      if (auto pull = handler_.pull(*peer, request->pull); !pull.ok()) {
        reply(pull.status());
      } else {
        const std::string digest = pull->header.payload_xxh3();
        pull->header.clear_payload_xxh3();  // it follows the payload
        const std::string reply_head =
            bulk_frame(kBulkReplyMagic, 0, pull->header.SerializeAsString());
        if (write_all(s, reply_head, stall, "pull").ok() &&
            send_payload(s, pull->payload, digest, stall, "pull", admitted).ok()) {
          pulls_sent_.fetch_add(1);
          handler_.pull_sent(*peer, *pull);
        }
      }
    } else {
      const auto began = Clock::now();
      const pb::TensorHeader& header = request->push;
      if (auto admission = handler_.begin_push(*peer, header); !admission.ok()) {
        reply(admission.status());
      } else if (Status bad = check_stream_header(header, admission->max_payload_bytes,
                                                  "bulk lane push", /*digest_in_header=*/false);
                 !bad.ok()) {
        handler_.abort_push(admission->session, header, bad);
        reply(bad);
      } else {
        std::string payload = std::move(admission->buffer);
        reserve_receive_buffer(payload, header.payload_bytes());
        payload.resize(header.payload_bytes());  // zero-fills only what the buffer never held
        Status got = write_all(s, bulk_frame(kBulkReplyMagic, 0, {}), stall, "push go-ahead");
        std::string digest;
        if (got.ok())
          got = receive_payload(s, &payload, stall, "push of node '" + peer->name + "'", &digest,
                                admitted);
        if (!got.ok()) {
          handler_.abort_push(admission->session, header, got);
          reply(got);
        } else {
          pushes_received_.fetch_add(1);
          auto answer = handler_.finish_push(admission->session, header, std::move(payload), began);
          if (!answer.ok())
            reply(answer.status());
          else
            (void)write_all(s, bulk_frame(kBulkReplyMagic, 0, answer->SerializeAsString()), stall,
                            "push answer");
        }
      }
    }
    (void)SSL_shutdown(s);  // close_notify: the reply is complete
  }
  ssl.reset();
  {
    // Out of stop()'s reach before the descriptor is closed (and its number reused).
    std::lock_guard<std::mutex> lk(mu_);
    active_fds_.erase(id);
    finished_.push_back(id);
  }
  ::close(fd);
}

void BulkLaneServer::stop() {
  if (listener_) listener_->stop();
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    for (const auto& [id, fd] : active_fds_) (void)::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
    finished_.clear();
  }
  for (auto& [id, t] : threads)
    if (t.joinable()) t.join();
}

BulkLaneServer::~BulkLaneServer() {
  stop();
}

// ---------------------------------------------------------------------------------- client --

namespace {

// A reply frame: OK with its body, or the status it carries (its message prefixed by `what`).
// It may take `answer` to start; then the socket is back to `stall`.
StatusOr<std::string> read_reply(SSL* ssl, std::chrono::milliseconds answer,
                                 std::chrono::milliseconds stall, const std::string& what) {
  uint8_t code = 0;
  std::string body;
  tls_socket::set_io_timeout(SSL_get_fd(ssl), answer);
  Status got = read_frame(ssl, kBulkReplyMagic, answer, what, &code, &body);
  tls_socket::set_io_timeout(SSL_get_fd(ssl), stall);
  ATOLL_RETURN_IF_ERROR(got);
  if (!known_code(code))
    return DataLoss(what + ": the reply carries an unknown status code " + std::to_string(code));
  if (code != 0) return Status(static_cast<StatusCode>(code), what + ": " + body);
  return body;
}

}  // namespace

StatusOr<std::shared_ptr<void>> BulkLaneClient::context() {
  std::lock_guard<std::mutex> lk(context_mu_);
  if (context_) return context_;
  if (!options_.identity)
    return FailedPrecondition("the bulk lane at " + options_.target + " needs a TLS identity");
  std::string error;
  SslCtxPtr ctx = tls_socket::client_context(*options_.identity, &error);
  if (!ctx) return Internal("bulk lane at " + options_.target + ": " + error);
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
  context_ =
      std::shared_ptr<void>(ctx.release(), [](void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); });
  return context_;
}

// An open, verified connection to the lane.
struct BulkLaneClient::Connection {
  tls_socket::Socket socket;
  SslPtr ssl;
};

StatusOr<BulkLaneClient::Connection> BulkLaneClient::connect(const std::string& what,
                                                             bool* reached) {
  if (reached) *reached = false;
  ATOLL_ASSIGN_OR_RETURN(std::shared_ptr<void> ctx, context());
  const BulkLaneClientOptions& o = options_;
  std::string host, port, error;
  if (!tls_socket::split_target(o.target, &host, &port))
    return InvalidArgument(what + ": bulk lane target '" + o.target + "' is not HOST:PORT");
  Connection c;
  c.socket = tls_socket::connect_tcp(host, port, Clock::now() + o.connect_timeout, &error);
  if (c.socket.fd() < 0)
    return Unavailable(what + ": cannot reach the bulk lane at " + o.target + " (" + error + ")");
  c.ssl.reset(SSL_new(static_cast<SSL_CTX*>(ctx.get())));
  if (!c.ssl || SSL_set_fd(c.ssl.get(), c.socket.fd()) != 1)
    return Internal(what + ": cannot set up TLS: " + ossl::last_error());
  // The coordinator's certificate must name it, as gRPC checks.
  const std::string name = o.server_name.empty() ? host : o.server_name;
  if (tls_socket::is_ip_literal(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c.ssl.get()), name.c_str());
  } else {
    SSL_set_tlsext_host_name(c.ssl.get(), name.c_str());
    SSL_set1_host(c.ssl.get(), name.c_str());
  }
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_connect(c.ssl.get());
  if (rc != 1) {
    const long verify = SSL_get_verify_result(c.ssl.get());
    const std::string detail = verify != X509_V_OK ? std::string("its certificate: ") +
                                                         X509_verify_cert_error_string(verify)
                                                   : io_failure(c.ssl.get(), rc, o.connect_timeout);
    return Unavailable(what + ": TLS handshake with the bulk lane at " + o.target + " failed (" +
                       detail + ")");
  }
  if (reached) *reached = true;
  tls_socket::set_io_timeout(c.socket.fd(), o.stall_timeout);
  return c;
}

Status BulkLaneClient::pull(const pb::PullParamsRequest& request, uint64_t max_payload_bytes,
                            pb::TensorHeader* header, std::string* payload, bool* reached) {
  const std::string what = "PullParams over the bulk lane at " + options_.target;
  const tls_socket::SigpipeBlock no_sigpipe;
  ATOLL_ASSIGN_OR_RETURN(Connection c, connect(what, reached));
  SSL* s = c.ssl.get();
  const auto stall = options_.stall_timeout;
  ATOLL_RETURN_IF_ERROR(write_all(
      s, bulk_frame(kBulkRequestMagic, kBulkPull, request.SerializeAsString()), stall, what));
  ATOLL_ASSIGN_OR_RETURN(std::string body, read_reply(s, options_.answer_timeout, stall, what));
  pb::TensorHeader h;
  if (!h.ParseFromString(body)) return DataLoss(what + ": the reply's header does not parse");
  ATOLL_RETURN_IF_ERROR(check_stream_header(h, max_payload_bytes, what, false));
  reserve_receive_buffer(*payload, h.payload_bytes());
  payload->resize(h.payload_bytes());
  std::string digest;
  ATOLL_RETURN_IF_ERROR(receive_payload(s, payload, stall, what, &digest));
  h.set_payload_xxh3(digest);  // checked
  *header = std::move(h);
  return Status::Ok();
}

double push_upload_seconds(double call_seconds, double written_seconds,
                           const pb::PushUpdateResponse& answer) {
  const double after = answer.seconds_after_payload();
  return after > 0 && after < call_seconds ? call_seconds - after : written_seconds;
}

Status BulkLaneClient::push(const pb::TensorHeader& header, std::string_view payload,
                            pb::PushUpdateResponse* response, bool* reached, double* sent_seconds) {
  const auto started = Clock::now();
  const std::string what = "PushUpdate over the bulk lane at " + options_.target;
  if (header.payload_bytes() != payload.size())
    return InvalidArgument(what + ": the header declares " +
                           std::to_string(header.payload_bytes()) + " bytes, the payload has " +
                           std::to_string(payload.size()));
  const tls_socket::SigpipeBlock no_sigpipe;
  ATOLL_ASSIGN_OR_RETURN(Connection c, connect(what, reached));
  SSL* s = c.ssl.get();
  const auto stall = options_.stall_timeout;
  pb::TensorHeader h = header;
  h.clear_payload_xxh3();  // it follows the payload
  ATOLL_RETURN_IF_ERROR(
      write_all(s, bulk_frame(kBulkRequestMagic, kBulkPush, h.SerializeAsString()), stall, what));
  ATOLL_ASSIGN_OR_RETURN(std::string go_ahead, read_reply(s, options_.answer_timeout, stall, what));
  if (!go_ahead.empty()) return DataLoss(what + ": the go-ahead carries a body");
  ATOLL_RETURN_IF_ERROR(send_payload(s, payload, header.payload_xxh3(), stall, what));
  const double written = std::chrono::duration<double>(Clock::now() - started).count();
  ATOLL_ASSIGN_OR_RETURN(std::string body, read_reply(s, options_.answer_timeout, stall, what));
  if (!response->ParseFromString(body))
    return DataLoss(what + ": the answer is not a PushUpdateResponse");
  if (sent_seconds)
    *sent_seconds = push_upload_seconds(
        std::chrono::duration<double>(Clock::now() - started).count(), written, *response);
  return Status::Ok();
}

}  // namespace atl::transport
