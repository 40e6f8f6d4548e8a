#include "node/teacher_service.h"

#include <grpcpp/server_builder.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "algorithms/distill/loss.h"
#include "algorithms/distill/topk.h"
#include "kernels/formats/convert.h"
#include "node/site_data.h"
#include "transport/channel.h"
#include "transport/grpc_status.h"
#include "transport/tensor_stream.h"
#include "transport/tls/credentials.h"

namespace atl::node {

namespace pb = atoll_pb::v1;
using algorithms::distill::HeadTeacherLogits;
using algorithms::distill::TeacherLogits;

namespace {

// Rows [row0, ...) and vocabulary [v0, ...) of a teacher head, seen as rows from 0 and ids from 0
// (what build_topk expects for one window of one shard).
class ShiftedLogits final : public TeacherLogits<float> {
 public:
  ShiftedLogits(TeacherLogits<float>& inner, int row0, int v0) : in_(inner), r0_(row0), v0_(v0) {}
  void tile(int r0, int r1, int v0, int v1, float* out, int ld) override {
    in_.tile(r0 + r0_, r1 + r0_, v0 + v0_, v1 + v0_, out, ld);
  }

 private:
  TeacherLogits<float>& in_;
  int r0_, v0_;
};

grpc::Status err(grpc::StatusCode code, const std::string& msg) { return {code, msg}; }

}  // namespace

StatusOr<int> parse_representation(const std::string& rep) {
  if (rep == "bf16") return 0;
  if (rep.rfind("topk:", 0) == 0) {
    const std::string k = rep.substr(5);
    if (!k.empty() && k.size() <= 6 && k.find_first_not_of("0123456789") == std::string::npos) {
      const int v = std::stoi(k);
      if (v >= 1 && v <= static_cast<int>(kTeacherMaxTopK)) return v;
    }
  }
  return InvalidArgument("representation '" + rep.substr(0, 40) + "' must be bf16 or topk:K with K in [1, " +
                         std::to_string(kTeacherMaxTopK) + "]");
}

StatusOr<std::pair<int, int>> parse_vocab_shard(const std::string& text) {
  const Status bad = InvalidArgument("--vocab-shard " + text + " must be i/S with 0 <= i < S");
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad;
  auto number = [](const std::string& t) -> int64_t {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::stoll(t);
  };
  const int64_t i = number(text.substr(0, slash)), n = number(text.substr(slash + 1));
  if (i < 0 || n < 1 || i >= n) return bad;
  return std::pair<int, int>{static_cast<int>(i), static_cast<int>(n)};
}

StatusOr<TeacherServiceOptions> teacher_service_options(LoadedCheckpoint checkpoint,
                                                        const DataSpec& data,
                                                        const std::string& brown_dir, int shard,
                                                        int shards, bool require_tls_identity) {
  const int vocab = checkpoint.meta.model.vocab;
  if (shards > vocab)
    return InvalidArgument("--vocab-shard " + std::to_string(shard) + "/" + std::to_string(shards) +
                           ": more shards than vocabulary ids");
  ATOLL_ASSIGN_OR_RETURN(SiteData site,
                         load_site_data_with_blob(data, checkpoint.meta.tokenizer, brown_dir));
  TeacherServiceOptions o;
  o.model = checkpoint.meta.model;
  o.params = std::move(checkpoint.params);
  o.data = std::move(site.train);
  o.data_spec = data.to_string();
  const auto range = algorithms::distill::shard_range(vocab, shards, shard);
  o.vocab_begin = range.v0;
  o.vocab_end = range.v1;
  o.require_tls_identity = require_tls_identity;
  return o;
}

TeacherService::TeacherService(TeacherServiceOptions options)
    : o_(std::move(options)), fingerprint_(o_.params.fingerprint()), model_(o_.model) {}

uint64_t TeacherService::requests_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_;
}

grpc::Status TeacherService::authenticate(const grpc::ServerContext& ctx, std::string* who) const {
  if (!o_.require_tls_identity) {
    *who = "insecure-peer";
    return grpc::Status::OK;
  }
  auto id = transport::peer_identity(ctx);
  if (!id.ok())
    return err(grpc::StatusCode::UNAUTHENTICATED,
               "teacher: the call carries no verified client certificate: " + id.status().message());
  *who = id->name;
  return grpc::Status::OK;
}

grpc::Status TeacherService::same_parameters(const std::string& checked) const {
  // "" comes from students older than the field: they checked Info alone, at start.
  if (checked.empty() || checked == fingerprint_) return grpc::Status::OK;
  return err(grpc::StatusCode::FAILED_PRECONDITION,
             "teacher: holds parameters " + fingerprint_.substr(0, 16) + ", not the parameters " +
                 checked.substr(0, 16) +
                 " the student checked at its start (the teacher was restarted with another "
                 "checkpoint): point the student at teachers of one checkpoint, restarting this "
                 "teacher with the checkpoint it served before or the student with this one");
}

grpc::Status TeacherService::Info(grpc::ServerContext* ctx, const pb::TeacherInfoRequest*,
                                  pb::TeacherInfo* resp) {
  std::string who;
  if (grpc::Status s = authenticate(*ctx, &who); !s.ok()) return s;
  resp->set_vocab(static_cast<uint32_t>(o_.model.vocab));
  resp->set_seq_len(static_cast<uint32_t>(o_.model.seq_len));
  resp->set_vocab_begin(static_cast<uint32_t>(o_.vocab_begin));
  resp->set_vocab_end(static_cast<uint32_t>(o_.vocab_end));
  resp->set_data(o_.data_spec);
  resp->set_params_fingerprint(fingerprint_);
  resp->set_max_rows(kTeacherMaxRows);
  return grpc::Status::OK;
}

grpc::Status TeacherService::Targets(grpc::ServerContext* ctx, const pb::TargetsRequest* req,
                                     grpc::ServerWriter<pb::TargetsChunk>* writer) {
  using grpc::StatusCode;
  std::string who;
  if (grpc::Status s = authenticate(*ctx, &who); !s.ok()) return s;
  if (grpc::Status s = same_parameters(req->params_fingerprint()); !s.ok()) return s;
  auto k_or = parse_representation(req->representation());
  if (!k_or.ok()) return err(StatusCode::INVALID_ARGUMENT, "teacher: " + k_or.status().message());
  const int V = o_.model.vocab;
  if (req->row_end() <= req->row_begin())
    return err(StatusCode::INVALID_ARGUMENT, "teacher: empty row range [" +
                                                 std::to_string(req->row_begin()) + ", " +
                                                 std::to_string(req->row_end()) + ")");
  const uint32_t rows = req->row_end() - req->row_begin();
  if (rows > kTeacherMaxRows)
    return err(StatusCode::RESOURCE_EXHAUSTED,
               "teacher: request for " + std::to_string(rows) + " rows; at most " +
                   std::to_string(kTeacherMaxRows) + " per request (split the batch)");
  const int T = static_cast<int>(req->seq());
  if (T < 1 || T > o_.model.seq_len)
    return err(StatusCode::INVALID_ARGUMENT, "teacher: seq " + std::to_string(req->seq()) +
                                                 " outside [1, " + std::to_string(o_.model.seq_len) +
                                                 "] (the teacher's seq_len)");
  const uint32_t v0 = req->vocab_begin(), v1 = req->vocab_end();
  if (v1 <= v0 || static_cast<int>(v0) < o_.vocab_begin || static_cast<int>(v1) > o_.vocab_end)
    return err(StatusCode::OUT_OF_RANGE,
               "teacher: vocabulary range [" + std::to_string(v0) + ", " + std::to_string(v1) +
                   ") is not inside the shard this teacher serves [" +
                   std::to_string(o_.vocab_begin) + ", " + std::to_string(o_.vocab_end) + ")");
  const int width = static_cast<int>(v1 - v0);
  const int K = std::min(*k_or, width);
  const double tau = req->tau();
  if (K > 0 && !(std::isfinite(tau) && tau > 0))
    return err(StatusCode::INVALID_ARGUMENT, "teacher: tau must be finite and > 0 for top-k");
  const uint32_t window_rows = req->window_rows() == 0 ? 1 : req->window_rows();
  if (window_rows > rows)
    return err(StatusCode::INVALID_ARGUMENT, "teacher: window_rows " +
                                                 std::to_string(window_rows) + " exceeds the " +
                                                 std::to_string(rows) + " rows asked for");
  const uint64_t per_token = K > 0 ? 8ull * K + 4 : 2ull * width;
  const uint64_t total = per_token * rows * static_cast<uint64_t>(T);
  if (total > kTeacherMaxRequestBytes)
    return err(StatusCode::RESOURCE_EXHAUSTED,
               "teacher: request would stream " + std::to_string(total) + " bytes; at most " +
                   std::to_string(kTeacherMaxRequestBytes) + " per request (fewer rows or top-k)");

  // The rows' tokens: explicit, or the teacher's own sample of (seed, step).
  std::vector<int32_t> tokens;
  const size_t want = static_cast<size_t>(rows) * (T + 1);
  if (req->tokens_size() > 0) {
    if (static_cast<size_t>(req->tokens_size()) != want)
      return err(StatusCode::INVALID_ARGUMENT,
                 "teacher: " + std::to_string(req->tokens_size()) + " token ids for " +
                     std::to_string(rows) + " rows of " + std::to_string(T + 1) + " (expected " +
                     std::to_string(want) + ")");
    tokens.assign(req->tokens().begin(), req->tokens().end());
    for (int32_t id : tokens)
      if (id < 0 || id >= V)
        return err(StatusCode::INVALID_ARGUMENT, "teacher: token id " + std::to_string(id) +
                                                     " outside the vocabulary [0, " +
                                                     std::to_string(V) + ")");
  } else {
    if (req->row_end() > req->batch_size())
      return err(StatusCode::INVALID_ARGUMENT,
                 "teacher: rows end at " + std::to_string(req->row_end()) + " past batch_size " +
                     std::to_string(req->batch_size()));
    if (Status s = algorithms::data::check_sampling(o_.data, static_cast<int>(req->batch_size()), T);
        !s.ok())
      return err(StatusCode::FAILED_PRECONDITION, "teacher: cannot sample that batch: " + s.message());
    auto b = algorithms::data::sample_rows(
        o_.data, req->seed(), static_cast<int64_t>(req->step()),
        {static_cast<int>(req->row_begin()), static_cast<int>(req->row_end())}, T);
    tokens = std::move(b.tokens);
  }
  if (!req->batch_sha256().empty()) {
    const std::string have = algorithms::data::batch_sha256(tokens);
    if (have != req->batch_sha256())
      return err(StatusCode::FAILED_PRECONDITION,
                 "teacher: unknown batch (seed " + std::to_string(req->seed()) + ", step " +
                     std::to_string(req->step()) + ", rows [" + std::to_string(req->row_begin()) +
                     ", " + std::to_string(req->row_end()) + ")): the teacher's data " +
                     o_.data_spec + " gives sha256 " + have.substr(0, 16) +
                     ", the student expects " + req->batch_sha256().substr(0, 16) +
                     " (different data, tokenizer or seed; or send token ids)");
  }

  std::vector<int32_t> inputs(static_cast<size_t>(rows) * T);
  for (uint32_t r = 0; r < rows; ++r)
    std::memcpy(inputs.data() + static_cast<size_t>(r) * T, tokens.data() + static_cast<size_t>(r) * (T + 1),
                sizeof(int32_t) * T);

  std::lock_guard<std::mutex> lock(mu_);
  const float* h = model_.forward_hidden(o_.params, inputs.data(), static_cast<int>(rows), T);
  const float* W =
      o_.params.data() + model_.layout().find(algorithms::head_param_name(o_.model))->offset;
  HeadTeacherLogits<float> head(h, W, o_.model.dim);
  std::vector<float> tile;
  std::vector<uint16_t> codes;
  std::vector<int32_t> ids;
  std::vector<float> lg, tail;
  std::string payload;
  uint32_t window = 0;
  for (uint32_t w0 = 0; w0 < rows; w0 += window_rows, ++window) {
    if (ctx->IsCancelled()) return err(StatusCode::CANCELLED, "teacher: the student cancelled");
    const uint32_t w1 = std::min(rows, w0 + window_rows);
    const int n = static_cast<int>(w1 - w0) * T;
    if (K == 0) {
      tile.resize(static_cast<size_t>(n) * width);
      head.tile(static_cast<int>(w0) * T, static_cast<int>(w1) * T, static_cast<int>(v0),
                static_cast<int>(v1), tile.data(), width);
      codes.resize(tile.size());
      kernels::formats::quantize_bf16(tile, codes);
      payload.assign(reinterpret_cast<const char*>(codes.data()), codes.size() * 2);
    } else {
      ShiftedLogits shifted(head, static_cast<int>(w0) * T, static_cast<int>(v0));
      ids.resize(static_cast<size_t>(n) * K);
      lg.resize(ids.size());
      tail.resize(static_cast<size_t>(n));
      algorithms::distill::build_topk<float>(shifted, n, width, K, tau, std::min(n, 256), 1,
                                             ids.data(), lg.data(), tail.data());
      for (int32_t& id : ids) id += static_cast<int32_t>(v0);
      payload.clear();
      payload.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
      payload.append(reinterpret_cast<const char*>(lg.data()), lg.size() * 4);
      payload.append(reinterpret_cast<const char*>(tail.data()), tail.size() * 4);
    }
    pb::TensorHeader header;
    header.set_codec(req->representation());
    header.set_numel(static_cast<uint64_t>(n));
    Status s = transport::for_each_chunk(header, payload, [&](const pb::TensorChunk& c) -> Status {
      pb::TargetsChunk out;
      out.set_window(window);
      out.set_row_begin(req->row_begin() + w0);
      out.set_row_end(req->row_begin() + w1);
      *out.mutable_chunk() = c;
      if (!writer->Write(out)) return Unavailable("the student went away");
      return Status::Ok();
    });
    if (!s.ok()) return transport::to_grpc(s);
  }
  ++served_;
  return grpc::Status::OK;
}

StatusOr<std::unique_ptr<TeacherServer>> TeacherServer::start(
    TeacherService& service, const std::string& listen,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
    return InvalidArgument("--listen " + listen + " must be HOST:PORT, e.g. 0.0.0.0:7071");
  std::unique_ptr<TeacherServer> s(new TeacherServer());
  ATOLL_RETURN_IF_ERROR(transport::check_can_listen(listen, "--listen"));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, &s->port_);
  builder.RegisterService(&service);
  transport::apply_server_limits(builder);
  transport::apply_exclusive_port(builder);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    // Bound by another process between the check above and gRPC's bind, or refused otherwise.
    Status why = transport::check_can_listen(listen, "--listen");
    return why.ok() ? Unavailable("cannot listen on " + listen + " (gRPC refused the address)")
                    : why;
  }
  s->address_ = listen.substr(0, colon) + ":" + std::to_string(s->port_);
  return s;
}

void TeacherServer::shutdown() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

TeacherServer::~TeacherServer() { shutdown(); }

}  // namespace atl::node
