#include "measure/lane.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "kernels/core/file_io.h"
#include "transport/bulk_lane.h"
#include "transport/tensor_stream.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"
#include "transport/tls/openssl_util.h"

namespace atl::measure {

namespace pb = atoll_pb::v1;
using Clock = std::chrono::steady_clock;

namespace {

// Serves one payload; keeps the last push and hands its buffer back to the next.
class FixedPayload final : public transport::BulkHandler {
 public:
  explicit FixedPayload(size_t bytes) : payload_(bytes, '\0') {
    for (size_t i = 0; i < bytes; i += 4096) payload_[i] = static_cast<char>(i >> 12);
  }
  StatusOr<Pull> pull(const transport::PeerIdentity&, const pb::PullParamsRequest&) override {
    Pull p;
    p.header.set_wire_version(transport::kWireVersion);
    p.header.set_codec("bytes");
    p.header.set_payload_bytes(payload_.size());
    p.payload = payload_;
    return p;
  }
  void pull_sent(const transport::PeerIdentity&, const Pull&) override {}
  StatusOr<PushAdmission> begin_push(const transport::PeerIdentity&,
                                     const pb::TensorHeader&) override {
    return PushAdmission{payload_.size(), std::move(kept_), nullptr};
  }
  void abort_push(const std::shared_ptr<void>&, const pb::TensorHeader&, const Status&) override {}
  StatusOr<pb::PushUpdateResponse> finish_push(const std::shared_ptr<void>&,
                                               const pb::TensorHeader&, std::string payload,
                                               Clock::time_point) override {
    kept_ = std::move(payload);
    pb::PushUpdateResponse r;
    r.set_accepted(true);
    return r;
  }
  const std::string& payload() const { return payload_; }

 private:
  std::string payload_;
  std::string kept_;  // one push at a time here
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

StatusOr<LaneSpeed> measure_lane_speed(size_t payload_bytes, int transfers) {
  if (transfers < 1) return InvalidArgument("at least one transfer");
  // A throwaway CA, server and node certificate, removed on return.
  std::string dir = (std::filesystem::temp_directory_path() / "atoll-lane-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return IoError("cannot create a temporary directory");
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove{dir};
  ATOLL_RETURN_IF_ERROR(transport::ca_init(dir));
  ATOLL_RETURN_IF_ERROR(transport::ca_issue(dir, "coordinator", transport::Role::kServer));
  ATOLL_RETURN_IF_ERROR(transport::ca_issue(dir, "node", transport::Role::kNode));
  ATOLL_ASSIGN_OR_RETURN(transport::TlsIdentity server,
                         transport::server_identity(dir, "coordinator"));
  ATOLL_ASSIGN_OR_RETURN(std::string ca, atl::read_file(transport::ca_cert_path(dir)));
  ATOLL_ASSIGN_OR_RETURN(std::string cert, atl::read_file(transport::cert_path(dir, "node")));
  ATOLL_ASSIGN_OR_RETURN(std::string key, atl::read_file(transport::key_path(dir, "node")));

  FixedPayload handler(payload_bytes);
  transport::BulkLaneOptions so;
  so.listen = "127.0.0.1:0";
  so.tls = std::move(server);
  ATOLL_ASSIGN_OR_RETURN(std::unique_ptr<transport::BulkLaneServer> lane,
                         transport::BulkLaneServer::start(so, handler));
  transport::BulkLaneClientOptions co;
  co.target = "127.0.0.1:" + std::to_string(lane->port());
  co.identity = std::make_shared<const transport::TlsIdentity>(
      transport::TlsIdentity{std::move(ca), std::move(cert), std::move(key)});
  co.server_name = "coordinator";
  transport::BulkLaneClient client(co);

  LaneSpeed out;
  out.payload_bytes = payload_bytes;
  std::string received;
  for (int i = 0; i < transfers; ++i) {
    pb::TensorHeader h;
    const auto t0 = Clock::now();
    ATOLL_RETURN_IF_ERROR(
        client.pull(pb::PullParamsRequest(), payload_bytes, &h, &received, nullptr));
    out.pull_seconds.push_back(seconds_since(t0));
  }
  if (received != handler.payload()) return DataLoss("the pulled payload differs");
  pb::TensorHeader push;
  push.set_wire_version(transport::kWireVersion);
  push.set_codec("bytes");
  push.set_payload_bytes(received.size());
  for (int i = 0; i < transfers; ++i) {
    pb::PushUpdateResponse r;
    double sent = 0;
    ATOLL_RETURN_IF_ERROR(client.push(push, received, &r, nullptr, &sent));
    out.push_seconds.push_back(sent);
  }
  return out;
}

}  // namespace atl::measure
