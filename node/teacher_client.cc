#include "node/teacher_client.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>

#include "algorithms/data/dataset.h"
#include "kernels/formats/convert.h"
#include "node/teacher_service.h"
#include "transport/channel.h"
#include "transport/tensor_stream.h"
#include "transport/unknown_fields.h"

namespace atl::node {

namespace pb = atoll_pb::v1;

void ShardTeacherLogits::tile(int r0, int r1, int v0, int v1, float* out, int ld) {
  for (const auto& s : t_.shards) {
    const int a = std::max(v0, s.v0), b = std::min(v1, s.v1);
    if (a >= b) continue;
    const int w = s.v1 - s.v0;
    for (int r = r0; r < r1; ++r) {
      const uint16_t* src = s.codes.data() + static_cast<size_t>(r) * w + (a - s.v0);
      float* dst = out + static_cast<size_t>(r - r0) * ld + (a - v0);
      kernels::formats::dequantize_bf16(std::span<const uint16_t>(src, b - a),
                                        std::span<float>(dst, b - a));
    }
  }
}

StatusOr<transport::ClientTls> site_teacher_credentials(const std::string& tls_dir,
                                                        const std::string& name,
                                                        const std::string& teacher_name) {
  ATOLL_ASSIGN_OR_RETURN(transport::ClientTls tls,
                         transport::client_credentials(tls_dir, name, teacher_name));
  tls.name_flag = "--teacher-name";
  return tls;
}

namespace {

void set_deadline(grpc::ClientContext& ctx, double seconds) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

}  // namespace

Status TeacherClient::call_error(const Peer& p, const grpc::Status& s) const {
  // A gRPC server without the Teacher service (a coordinator, say) answers UNIMPLEMENTED with
  // no message.
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED)
    return FailedPrecondition("teacher " + p.address +
                              ": the server at this address does not serve the Teacher service "
                              "(is it a coordinator?): give the address of an `atoll node --role "
                              "teacher`");
  // "teacher ADDR not reachable (...)" for a connection failure, "teacher ADDR: ..." else.
  return transport::explain_call_error(s, p.address, o_.tls, "teacher " + p.address);
}

StatusOr<std::unique_ptr<TeacherClient>> TeacherClient::connect(TeacherClientOptions options,
                                                                int vocab) {
  if (options.addresses.empty()) return InvalidArgument("no teacher address (--teacher HOST:PORT[,...])");
  ATOLL_ASSIGN_OR_RETURN(int k, parse_representation(options.representation));
  std::unique_ptr<TeacherClient> c(new TeacherClient());
  c->o_ = std::move(options);
  c->V_ = vocab;
  c->k_ = std::min(k, vocab);
  std::string fingerprint;
  for (const auto& addr : c->o_.addresses) {
    Peer p;
    p.address = addr;
    p.channel = transport::create_channel(addr, c->o_.tls);
    p.stub = pb::Teacher::NewStub(p.channel);
    grpc::ClientContext ctx;
    set_deadline(ctx, c->o_.rpc_timeout_s);
    pb::TeacherInfo info;
    grpc::Status s = p.stub->Info(&ctx, pb::TeacherInfoRequest(), &info);
    if (!s.ok()) return c->call_error(p, s);
    ATOLL_RETURN_IF_ERROR(
        transport::refuse_unknown_fields(info, "its Info answer", "teacher " + addr));
    if (static_cast<int>(info.vocab()) != vocab)
      return FailedPrecondition("teacher " + addr + " has vocabulary " +
                                std::to_string(info.vocab()) + ", the student " +
                                std::to_string(vocab) + " (one tokenizer is needed)");
    if (!fingerprint.empty() && info.params_fingerprint() != fingerprint)
      return FailedPrecondition("teacher " + addr + " holds other parameters than " +
                                c->peers_.front().address + " (every shard must load one checkpoint)");
    fingerprint = info.params_fingerprint();
    c->params_fingerprint_ = fingerprint;
    p.v0 = static_cast<int>(info.vocab_begin());
    p.v1 = static_cast<int>(info.vocab_end());
    c->peers_.push_back(std::move(p));
  }
  std::sort(c->peers_.begin(), c->peers_.end(), [](const Peer& a, const Peer& b) { return a.v0 < b.v0; });
  int next = 0;
  for (const auto& p : c->peers_) {
    if (p.v0 != next)
      return FailedPrecondition("teacher shards do not tile the vocabulary: " + c->describe() +
                                " (expected a shard starting at " + std::to_string(next) + ")");
    next = p.v1;
  }
  if (next != vocab)
    return FailedPrecondition("teacher shards do not tile the vocabulary [0, " +
                              std::to_string(vocab) + "): " + c->describe());
  return c;
}

bool TeacherClient::wait_for_links(std::chrono::milliseconds max_wait) const {
  const auto deadline = std::chrono::system_clock::now() + max_wait;
  bool waited = false;  // some channel was not connected when the pause began
  for (const Peer& p : peers_) {
    if (p.channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) continue;
    waited = true;
    if (!transport::wait_until_connected(*p.channel, deadline)) return false;
  }
  if (!waited) std::this_thread::sleep_until(deadline);  // the failure was not the link
  return true;
}

std::string TeacherClient::describe() const {
  std::string out;
  for (const auto& p : peers_) {
    if (!out.empty()) out += ", ";
    out += p.address + " [" + std::to_string(p.v0) + ", " + std::to_string(p.v1) + ")";
  }
  return out;
}

StatusOr<TeacherTargets::Shard> TeacherClient::fetch_shard(const Peer& p, const pb::TargetsRequest& req,
                                                           int N, int k, std::vector<int32_t>* ids,
                                                           std::vector<float>* logits,
                                                           std::vector<float>* tail,
                                                           uint64_t* bytes) const {
  TeacherTargets::Shard shard;
  shard.v0 = p.v0;
  shard.v1 = p.v1;
  const int w = p.v1 - p.v0;
  const int T = static_cast<int>(req.seq());
  const uint64_t per_token = k > 0 ? 8ull * k + 4 : 2ull * w;
  if (k == 0) shard.codes.resize(static_cast<size_t>(N) * w);
  else {
    ids->resize(static_cast<size_t>(N) * k);
    logits->resize(ids->size());
    tail->resize(static_cast<size_t>(N));
  }
  grpc::ClientContext ctx;
  set_deadline(ctx, o_.rpc_timeout_s);
  auto reader = p.stub->Targets(&ctx, req);
  pb::TargetsChunk msg;
  uint32_t next_row = req.row_begin();
  int64_t window = -1;
  uint32_t w_begin = 0, w_end = 0;
  std::unique_ptr<transport::ChunkAssembler> asm_;
  auto bad = [&](const std::string& what) {
    ctx.TryCancel();
    return DataLoss("teacher " + p.address + ": " + what);
  };
  auto finish_window = [&]() -> Status {
    if (!asm_) return Status::Ok();
    if (Status s = asm_->finish(); !s.ok()) return bad("window " + std::to_string(window) + ": " + s.message());
    const auto& h = asm_->header();
    const int n = static_cast<int>(w_end - w_begin) * T;
    if (h.codec() != req.representation() || h.numel() != static_cast<uint64_t>(n))
      return bad("window " + std::to_string(window) + " has codec '" + h.codec().substr(0, 20) +
                 "' and " + std::to_string(h.numel()) + " rows; asked for '" + req.representation() +
                 "' and " + std::to_string(n));
    std::string payload = asm_->take_payload();
    if (payload.size() != per_token * n) return bad("window payload of the wrong size");
    const size_t row0 = static_cast<size_t>(w_begin - req.row_begin()) * T;
    if (k == 0) {
      std::memcpy(shard.codes.data() + row0 * w, payload.data(), payload.size());
    } else {
      const char* src = payload.data();
      std::memcpy(ids->data() + row0 * k, src, 4ull * n * k);
      std::memcpy(logits->data() + row0 * k, src + 4ull * n * k, 4ull * n * k);
      std::memcpy(tail->data() + row0, src + 8ull * n * k, 4ull * n);
      for (size_t i = row0 * k; i < (row0 + n) * k; ++i)
        if ((*ids)[i] < p.v0 || (*ids)[i] >= p.v1) return bad("top-k id outside the teacher's shard");
    }
    *bytes += payload.size();
    asm_.reset();
    return Status::Ok();
  };
  while (reader->Read(&msg)) {
    if (static_cast<int64_t>(msg.window()) != window) {
      ATOLL_RETURN_IF_ERROR(finish_window());
      if (msg.window() != static_cast<uint32_t>(window + 1) || msg.row_begin() != next_row ||
          msg.row_end() <= msg.row_begin() || msg.row_end() > req.row_end())
        return bad("windows out of order or outside the rows asked for");
      window = msg.window();
      w_begin = msg.row_begin();
      w_end = msg.row_end();
      next_row = w_end;
      asm_ = std::make_unique<transport::ChunkAssembler>(per_token * (w_end - w_begin) * T);
    } else if (msg.row_begin() != w_begin || msg.row_end() != w_end) {
      return bad("a window changed its rows mid-stream");
    }
    if (Status s = asm_->add(msg.chunk()); !s.ok()) return bad(s.message());
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return call_error(p, st);
  ATOLL_RETURN_IF_ERROR(finish_window());
  if (next_row != req.row_end()) return bad("the stream ended before every row arrived");
  return shard;
}

StatusOr<TeacherTargets> TeacherClient::fetch(uint64_t seed, int64_t step, int B, int T,
                                              const std::vector<int32_t>& tokens) const {
  TeacherTargets out;
  out.N = B * T;
  out.V = V_;
  out.k = k_;
  pb::TargetsRequest req;
  req.set_seed(seed);
  req.set_step(static_cast<uint64_t>(step));
  req.set_batch_size(static_cast<uint32_t>(B));
  req.set_row_begin(0);
  req.set_row_end(static_cast<uint32_t>(B));
  req.set_seq(static_cast<uint32_t>(T));
  req.set_batch_sha256(algorithms::data::batch_sha256(tokens));
  if (o_.send_tokens) req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  req.set_tau(o_.tau);
  req.set_window_rows(static_cast<uint32_t>(std::clamp(o_.window_rows, 1, B)));
  // Every teacher refuses the request unless it still holds these parameters: a gRPC channel
  // reconnects transparently, so a teacher restarted with another checkpoint between two calls
  // would otherwise answer with another model's logits.
  req.set_params_fingerprint(params_fingerprint_);
  const int N = out.N;
  struct Part {
    int k;
    std::vector<int32_t> ids;
    std::vector<float> logits, tail;
  };
  std::vector<Part> parts;
  for (const auto& p : peers_) {
    req.set_vocab_begin(static_cast<uint32_t>(p.v0));
    req.set_vocab_end(static_cast<uint32_t>(p.v1));
    const int ks = k_ > 0 ? std::min(k_, p.v1 - p.v0) : 0;
    req.set_representation(k_ > 0 ? "topk:" + std::to_string(ks) : "bf16");
    Part part{ks, {}, {}, {}};
    ATOLL_ASSIGN_OR_RETURN(TeacherTargets::Shard shard,
                           fetch_shard(p, req, N, ks, &part.ids, &part.logits, &part.tail,
                                       &out.wire_bytes));
    if (k_ == 0) out.shards.push_back(std::move(shard));
    else parts.push_back(std::move(part));
  }
  if (k_ == 0) return out;
  if (parts.size() == 1) {
    out.ids = std::move(parts[0].ids);
    out.logits = std::move(parts[0].logits);
    out.tail_lse = std::move(parts[0].tail);
    return out;
  }
  // Merge per row: the k largest over all shards; every other candidate joins the tail.
  const int K = k_;
  const double tau = o_.tau;
  out.ids.resize(static_cast<size_t>(N) * K);
  out.logits.resize(out.ids.size());
  out.tail_lse.resize(static_cast<size_t>(N));
  std::vector<std::pair<float, int32_t>> cand;
  for (int r = 0; r < N; ++r) {
    cand.clear();
    double m = -std::numeric_limits<double>::infinity();
    for (const auto& pt : parts) {
      for (int j = 0; j < pt.k; ++j)
        cand.emplace_back(pt.logits[static_cast<size_t>(r) * pt.k + j], pt.ids[static_cast<size_t>(r) * pt.k + j]);
      m = std::max(m, static_cast<double>(pt.tail[r]));
    }
    std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (size_t j = K; j < cand.size(); ++j) m = std::max(m, cand[j].first / tau);
    double sum = 0;
    if (std::isfinite(m)) {
      for (const auto& pt : parts)
        if (std::isfinite(pt.tail[r])) sum += std::exp(pt.tail[r] - m);
      for (size_t j = K; j < cand.size(); ++j) sum += std::exp(cand[j].first / tau - m);
    }
    out.tail_lse[r] = sum > 0 ? static_cast<float>(m + std::log(sum))
                              : -std::numeric_limits<float>::infinity();
    for (int j = 0; j < K; ++j) {
      out.logits[static_cast<size_t>(r) * K + j] = cand[j].first;
      out.ids[static_cast<size_t>(r) * K + j] = cand[j].second;
    }
  }
  return out;
}

}  // namespace atl::node
