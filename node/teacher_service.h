// `atoll node --role teacher`: serves a frozen teacher's outputs for the student's batches over
// mTLS gRPC (service Teacher in transport/proto/atoll.proto, docs/protocol.md).
//
// A request names rows of one batch, either as (seed, step, batch_size) of the teacher's own
// data (batches are pure functions of (seed, step)) or as explicit token ids, a vocabulary range
// inside the shard this process holds, and a representation: "bf16" shard logits or "topk:K"
// (ids, logits and the log-sum-exp of the rest of the range). The teacher runs its model to the
// final hidden states of those rows once, then streams one window of rows at a time; the logits
// of a window are formed from its LM head shard and dropped after encoding, so it never holds
// more than one window's (rows·T, shard) tile.
#pragma once

#include <grpcpp/server.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/checkpoint.h"
#include "node/data_source.h"
#include "transport/proto/atoll.grpc.pb.h"

namespace atl::node {

// Bounds on what one request may ask for (checked before any work).
inline constexpr uint32_t kTeacherMaxRows = 256;            // batch rows per request
inline constexpr uint64_t kTeacherMaxRequestBytes = 256ull << 20;  // encoded payload, all windows
inline constexpr uint32_t kTeacherMaxTopK = 1024;

struct TeacherServiceOptions {
  algorithms::ModelConfig model;
  algorithms::ParamSet params;
  algorithms::data::TokenDataset data;  // batches of (seed, step) are sampled from this
  std::string data_spec;
  int vocab_begin = 0, vocab_end = 0;  // the shard served
  bool require_tls_identity = true;    // false only with --insecure
};

// "bf16" or "topk:K" -> K (0 for bf16); InvalidArgument otherwise.
StatusOr<int> parse_representation(const std::string& rep);

// "i/S" (vocabulary shard i of S, 0 <= i < S) -> {i, S}; InvalidArgument naming --vocab-shard.
StatusOr<std::pair<int, int>> parse_vocab_shard(const std::string& text);

// A teacher as `atoll node --role teacher` serves it: `checkpoint` (from `atoll train`), the
// students' batches of (seed, step) sampled from `data` tokenized with the checkpoint's
// tokenizer, vocabulary shard `shard` of `shards`. InvalidArgument when there are more shards
// than vocabulary ids.
StatusOr<TeacherServiceOptions> teacher_service_options(LoadedCheckpoint checkpoint,
                                                        const DataSpec& data,
                                                        const std::string& brown_dir, int shard,
                                                        int shards, bool require_tls_identity);

class TeacherService final : public atoll_pb::v1::Teacher::Service {
 public:
  explicit TeacherService(TeacherServiceOptions options);

  grpc::Status Info(grpc::ServerContext* ctx, const atoll_pb::v1::TeacherInfoRequest* req,
                    atoll_pb::v1::TeacherInfo* resp) override;
  grpc::Status Targets(grpc::ServerContext* ctx, const atoll_pb::v1::TargetsRequest* req,
                       grpc::ServerWriter<atoll_pb::v1::TargetsChunk>* writer) override;

  uint64_t requests_served() const;

 private:
  grpc::Status authenticate(const grpc::ServerContext& ctx, std::string* who) const;
  // OK when `checked` (TargetsRequest.params_fingerprint) is "" or this teacher's fingerprint;
  // FAILED_PRECONDITION naming both otherwise: the student would distil from another model.
  grpc::Status same_parameters(const std::string& checked) const;

  TeacherServiceOptions o_;
  std::string fingerprint_;
  mutable std::mutex mu_;  // one request at a time through the model's buffers
  algorithms::Llama model_;
  uint64_t served_ = 0;
};

class TeacherServer {
 public:
  // Binds `listen` (HOST:PORT, port 0 = any) with the given credentials.
  static StatusOr<std::unique_ptr<TeacherServer>> start(
      TeacherService& service, const std::string& listen,
      std::shared_ptr<grpc::ServerCredentials> credentials);
  ~TeacherServer();
  const std::string& address() const { return address_; }
  void shutdown();
  void wait() { if (server_) server_->Wait(); }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
};

}  // namespace atl::node
