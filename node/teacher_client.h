// The student's side of the Teacher service: finds which teacher serves which vocabulary shard
// (they must tile [0, V) exactly), asks each for its shard of a batch's targets and assembles
// them: bf16 shard logits become a TeacherLogits the fused loss reads tile by tile; top-k lists
// from several shards merge into one top-k list per row plus the exact log-sum-exp of the rest.
// Every call has a deadline; every received chunk is checked (CRC, SHA-256, sizes, ids).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/distill/loss.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/credentials.h"

namespace atl::node {

// How a DiLoCo site (`atoll node --teacher`) reaches its teachers over mTLS: its own certificate
// tls_dir/<name>.{crt,key}, the name `teacher_name` the teachers' certificates must hold, set by
// --teacher-name, which is the flag a certificate without that name is explained with
// (`atoll node --role student` names its teachers with --server-name: client_credentials).
StatusOr<transport::ClientTls> site_teacher_credentials(const std::string& tls_dir,
                                                        const std::string& name,
                                                        const std::string& teacher_name);

// One batch's teacher targets for N = B·T rows.
struct TeacherTargets {
  int N = 0, V = 0;
  int k = 0;  // 0: bf16 shard logits; > 0: top-k
  struct Shard {
    int v0 = 0, v1 = 0;
    std::vector<uint16_t> codes;  // (N, v1 − v0) bf16
  };
  std::vector<Shard> shards;     // bf16, in vocabulary order, tiling [0, V)
  std::vector<int32_t> ids;      // top-k (N, k)
  std::vector<float> logits;     // top-k (N, k)
  std::vector<float> tail_lse;   // top-k (N)
  uint64_t wire_bytes = 0;       // payload bytes received for this batch

  algorithms::distill::TopKTargets<float> topk() const {
    return {k, ids.data(), logits.data(), tail_lse.data()};
  }
};

// bf16 shard logits seen as full-vocabulary tiles (any tile may straddle teacher shards).
class ShardTeacherLogits final : public algorithms::distill::TeacherLogits<float> {
 public:
  explicit ShardTeacherLogits(const TeacherTargets& t) : t_(t) {}
  void tile(int r0, int r1, int v0, int v1, float* out, int ld) override;

 private:
  const TeacherTargets& t_;
};

struct TeacherClientOptions {
  std::vector<std::string> addresses;  // HOST:PORT, one per teacher process
  transport::ClientTls tls;
  double rpc_timeout_s = 30;           // deadline of every call
  std::string representation = "bf16"; // or "topk:K"
  double tau = 1.0;
  int window_rows = 1;                 // batch rows per streamed window
  bool send_tokens = false;            // send ids instead of (seed, step)
};

class TeacherClient {
 public:
  // Asks every teacher for its Info (one call each, with the deadline) and checks that the
  // shards tile [0, vocab) and that every teacher has the same parameters.
  static StatusOr<std::unique_ptr<TeacherClient>> connect(TeacherClientOptions options, int vocab);

  // Targets for the (B, T + 1) batch `tokens`, step `step` of seed `seed`. Errors name the
  // teacher and say what happened (unreachable, deadline, refused, corrupt stream);
  // kFailedPrecondition when a teacher now holds other parameters than at connect.
  StatusOr<TeacherTargets> fetch(uint64_t seed, int64_t step, int B, int T,
                                 const std::vector<int32_t>& tokens) const;

  std::string describe() const;  // "a:1 [0, 128), b:2 [128, 256)"

  // The pause before retrying a fetch that found a teacher unreachable: until every teacher's
  // channel is connected (true) or max_wait has passed (false), driving their connection
  // attempts (transport::wait_until_connected). With every channel already connected it sleeps
  // max_wait (the failure was not the link).
  bool wait_for_links(std::chrono::milliseconds max_wait) const;

 private:
  struct Peer {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<atoll_pb::v1::Teacher::Stub> stub;
    int v0 = 0, v1 = 0;
  };
  StatusOr<TeacherTargets::Shard> fetch_shard(const Peer& p, const atoll_pb::v1::TargetsRequest& req,
                                              int N, int k, std::vector<int32_t>* ids,
                                              std::vector<float>* logits,
                                              std::vector<float>* tail, uint64_t* bytes) const;
  Status call_error(const Peer& p, const grpc::Status& s) const;

  TeacherClientOptions o_;
  int V_ = 0, k_ = 0;
  std::vector<Peer> peers_;  // sorted by v0
  // TeacherInfo.params_fingerprint every teacher reported at connect (hex SHA-256 of θ), sent
  // with every Targets request for the teacher to check.
  std::string params_fingerprint_;
};

}  // namespace atl::node
