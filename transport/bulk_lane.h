// The bulk lane: θ pulls and update pushes over TLS 1.3 connections of Atoll's own, on a port
// beside the coordinator's gRPC port, for the throughput gRPC's HTTP/2 stream does not reach
// (bench/RESULTS.md "Transport throughput"; docs/decisions.md "The bulk lane"). Everything else
// (joins, tasks, heartbeats, metrics, secure aggregation) stays on gRPC, and so do pulls and
// pushes wherever the lane is not offered or cannot be reached.
//
// Same trust as gRPC: TLS 1.3 only, the coordinator's certificate, a client certificate from the
// experiment's CA required and verified, the node named by its certificate exactly as on gRPC.
// Same payload check: XXH3-128 over the whole payload, here sent right after the payload (the
// sender hashes each piece as it writes it, the receiver as it lands, both while it is in cache:
// no pass over the payload before the first byte or after the last). What the lane leaves out
// is what TLS already does or what costs passes over the data: no chunking, no per-chunk CRC-32C
// (TLS's AEAD authenticates every record), no protobuf around the bytes.
//
// Wire (docs/protocol.md "The bulk lane"; the frames: transport/bulk_frame.h; integers
// little-endian), one transfer per connection:
//   request  "ATLQ" u8 version (1) u8 op (1 pull, 2 push) u16 0 u32 L, then L bytes of protobuf:
//            PullParamsRequest (pull) or TensorHeader (push; payload_xxh3 empty)
//   reply    "ATLR" u8 version (1) u8 code (atl::StatusCode, 0 = OK) u16 0 u32 L, then L bytes:
//            the error message when code != 0; else pull: TensorHeader (payload_xxh3 empty),
//            then payload_bytes raw bytes and their XXH3-128 (16 bytes); push: L = 0, the
//            go-ahead, after which the node sends payload_bytes raw bytes and their XXH3-128 and
//            gets a second reply, a PushUpdateResponse.
// A push waits for the go-ahead, so a refused header costs one round trip, not a payload. L is at
// most kMaxBulkMessageBytes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/core/status.h"
#include "transport/bulk_frame.h"
#include "transport/capped_listener.h"
#include "transport/connection_table.h"
#include "transport/proto/atoll.pb.h"
#include "transport/tls/credentials.h"

namespace atl::transport {

// A node that reads JoinResponse.bulk_port lists this in Capabilities.features; the
// coordinator gives the lane's port to such nodes only (an older node refuses the field).
inline constexpr char kFeatureBulkLane[] = "bulk_lane";

// Whether a Join asks for the bulk lane (lists kFeatureBulkLane among its features).
inline bool reads_bulk_lane(const atoll_pb::v1::JoinRequest& req) {
  for (const std::string& f : req.capabilities().features())
    if (f == kFeatureBulkLane) return true;
  return false;
}

// What the lane's server asks of the coordinator (coordinator/bulk_handler.h). Called on the
// connection's thread; `peer` is the verified client certificate.
class BulkHandler {
 public:
  virtual ~BulkHandler() = default;

  struct Pull {
    atoll_pb::v1::TensorHeader header;  // payload_bytes set; payload_xxh3 if known
    std::string_view payload;
    std::shared_ptr<const void> keep_alive;  // owns the bytes `payload` points to
  };
  virtual StatusOr<Pull> pull(const PeerIdentity& peer,
                              const atoll_pb::v1::PullParamsRequest& request) = 0;
  // The last byte of `pull` went out.
  virtual void pull_sent(const PeerIdentity& peer, const Pull& pull) = 0;

  struct PushAdmission {
    uint64_t max_payload_bytes = 0;  // the header is refused above it
    std::string buffer;              // storage to receive into (a reused one keeps its pages)
    std::shared_ptr<void> session;   // the handler's own, handed back to abort / finish
  };
  // Screens a push's header. After OK, exactly one of abort_push / finish_push follows.
  virtual StatusOr<PushAdmission> begin_push(const PeerIdentity& peer,
                                             const atoll_pb::v1::TensorHeader& header) = 0;
  virtual void abort_push(const std::shared_ptr<void>& session,
                          const atoll_pb::v1::TensorHeader& header, const Status& why) = 0;
  // `payload` passed its XXH3-128 check; `header` is the one begin_push screened. `began`: when
  // the header arrived.
  virtual StatusOr<atoll_pb::v1::PushUpdateResponse> finish_push(
      const std::shared_ptr<void>& session, const atoll_pb::v1::TensorHeader& header,
      std::string payload, std::chrono::steady_clock::time_point began) = 0;
  // Asked every kAdmissionCheckBytes of a transfer: an error (a certificate revoked since the
  // transfer began) cuts the connection there.
  virtual Status still_admitted(const PeerIdentity& /*peer*/) { return Status::Ok(); }
};

// Bytes of a payload between two BulkHandler::still_admitted checks (21 s at 100 kbit/s).
inline constexpr size_t kAdmissionCheckBytes = size_t{256} << 10;

struct BulkLaneOptions {
  std::string listen;  // HOST:PORT (port 0: a free one, see port())
  TlsIdentity tls;     // this server's certificate and key; clients must chain to tls.ca_pem
  std::chrono::milliseconds handshake_timeout{10000};  // TLS handshake and the request frame
  std::chrono::milliseconds stall_timeout{60000};      // no byte moved for this long: closed
  ConnectionCaps caps{.max_connections = 256, .max_per_address = 32, .evict_idle = false};
  // Lines about connections closed at a cap (CappedListener::set_refusal_log); empty = none.
  std::function<void(const std::string&)> refusal_log;
};

class BulkLaneServer {
 public:
  // Binds, then serves each connection on a thread of its own. `handler` must outlive the server.
  static StatusOr<std::unique_ptr<BulkLaneServer>> start(BulkLaneOptions options,
                                                         BulkHandler& handler);
  ~BulkLaneServer();  // stop()
  BulkLaneServer(const BulkLaneServer&) = delete;
  BulkLaneServer& operator=(const BulkLaneServer&) = delete;

  int port() const { return listener_->port(); }
  // Stops accepting, cuts the transfers in flight (their pushes are aborted) and joins their
  // threads. Idempotent.
  void stop();
  // Connections open now, and connections closed at once because a cap was reached.
  size_t open_connections() const { return listener_->open_connections(); }
  uint64_t refused_connections() const { return listener_->refused_connections(); }
  // Pulls whose payload went out whole, and pushes whose payload arrived whole and checked.
  uint64_t pulls_sent() const { return pulls_sent_.load(); }
  uint64_t pushes_received() const { return pushes_received_.load(); }

 private:
  BulkLaneServer(BulkLaneOptions options, BulkHandler& handler)
      : options_(std::move(options)), handler_(handler) {}
  void hand_over(int fd);
  void serve(uint64_t id, int fd);
  void reap_finished_locked();

  const BulkLaneOptions options_;
  BulkHandler& handler_;
  std::shared_ptr<void> ssl_ctx_;  // SSL_CTX
  std::unique_ptr<CappedListener> listener_;
  std::mutex mu_;  // guards the rest
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, int> active_fds_;  // connection id → descriptor, while it is served
  std::map<uint64_t, std::thread> threads_;
  std::vector<uint64_t> finished_;  // threads done, to be joined
  std::atomic<uint64_t> pulls_sent_{0}, pushes_received_{0};
};

struct BulkLaneClientOptions {
  std::string target;  // HOST:PORT of the lane
  std::shared_ptr<const TlsIdentity> identity;
  // The name the coordinator's certificate must carry; "" = the target's host.
  std::string server_name;
  std::chrono::milliseconds connect_timeout{10000};  // TCP connect and the TLS handshake
  std::chrono::milliseconds stall_timeout{60000};    // no byte moved for this long: failed
  // How long a reply may take to start: the coordinator plans a pull (an encoding) or checks
  // and aggregates a push (the round's commit when it is the last) before it answers.
  std::chrono::milliseconds answer_timeout{300000};
};

// Seconds a push took to upload, from the whole exchange (`call_seconds`) less the time the
// coordinator reports after the payload's last byte (answer.seconds_after_payload). Writes end
// once the bytes are buffered, long before a slow link has carried them (0.001 s for 111 kB at
// 1 Mbit/s); `written_seconds` (when the writes ended) stands in where the answer has no figure.
double push_upload_seconds(double call_seconds, double written_seconds,
                           const atoll_pb::v1::PushUpdateResponse& answer);

// Thread-safe: every transfer opens its own connection (from one TLS context, built from the
// identity's PEM texts at the first transfer).
class BulkLaneClient {
 public:
  explicit BulkLaneClient(BulkLaneClientOptions options) : options_(std::move(options)) {}

  // `*reached` (may be null) says whether the TLS handshake completed: false means the lane
  // could not be reached at all (a caller may then use gRPC instead).
  // Pull: the payload lands in *payload (its capacity reused), checked against its XXH3-128
  // (then set in the header); a header above `max_payload_bytes` is refused before any
  // allocation.
  Status pull(const atoll_pb::v1::PullParamsRequest& request, uint64_t max_payload_bytes,
              atoll_pb::v1::TensorHeader* header, std::string* payload, bool* reached);
  // Push: `header` must carry payload_bytes = payload.size(); payload_xxh3 when the caller knows
  // it (else the payload is hashed as it is sent).
  // `*sent_seconds` (may be null): from the start to the payload's last byte written, i.e.
  // without the wait for the coordinator's answer.
  Status push(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
              atoll_pb::v1::PushUpdateResponse* response, bool* reached,
              double* sent_seconds = nullptr);

  const std::string& target() const { return options_.target; }

 private:
  // The SSL_CTX every connection is made from; built once.
  StatusOr<std::shared_ptr<void>> context();
  // A new connection to the lane, its TLS handshake done and verified (`what` prefixes errors).
  // *reached (may be null): whether the lane answered, i.e. a failure is not one of reaching it.
  struct Connection;
  StatusOr<Connection> connect(const std::string& what, bool* reached);

  const BulkLaneClientOptions options_;
  std::mutex context_mu_;          // guards context_
  std::shared_ptr<void> context_;  // SSL_CTX
};

}  // namespace atl::transport
