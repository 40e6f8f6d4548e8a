#include "node/coordinator_client.h"

#include <bit>
#include <utility>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/outer_update.h"
#include "algorithms/compress/sparse_delta.h"
#include "kernels/core/sha256.h"
#include "kernels/cpu/ops.h"
#include "node/grpc_coordinator_calls.h"
#include "transport/tensor_stream.h"
#include "transport/unknown_fields.h"

namespace atl::node {
namespace pb = atoll_pb::v1;

CoordinatorClient::CoordinatorClient(ClientOptions options)
    : CoordinatorClient(std::make_unique<GrpcCoordinatorCalls>(std::move(options))) {}

CoordinatorClient::CoordinatorClient(std::unique_ptr<CoordinatorCalls> calls)
    : calls_(std::move(calls)) {}

std::string CoordinatorClient::current_experiment_id() const {
  std::lock_guard<std::mutex> lock(id_mu_);
  return experiment_id_;
}

StatusOr<pb::JoinResponse> CoordinatorClient::join(pb::JoinRequest req) {
  pb::JoinResponse resp;
  ATOLL_RETURN_IF_ERROR(calls_->join(req, &resp));
  // Before anything is read from it: an experiment setting this node cannot read would be
  // trained as if it were not there.
  ATOLL_RETURN_IF_ERROR(
      transport::refuse_unknown_fields(resp, "the answer to Join", "the coordinator"));
  {
    std::lock_guard<std::mutex> lock(id_mu_);
    experiment_id_ = resp.experiment_id();
  }
  return resp;
}

StatusOr<bool> CoordinatorClient::heartbeat(uint64_t round, uint32_t inner_step, double loss,
                                            double tokens_per_s) {
  pb::HeartbeatRequest req;
  req.set_experiment_id(current_experiment_id());
  req.set_round(round);
  req.set_inner_step(inner_step);
  req.set_loss(loss);
  req.set_tokens_per_s(tokens_per_s);
  pb::HeartbeatResponse resp;
  ATOLL_RETURN_IF_ERROR(calls_->heartbeat(req, &resp));
  return resp.known();
}

StatusOr<pb::Task> CoordinatorClient::next_task(uint64_t last_round_done, uint32_t wait_ms) {
  pb::NextTaskRequest req;
  req.set_experiment_id(current_experiment_id());
  req.set_last_round_done(last_round_done);
  req.set_wait_ms(wait_ms);
  pb::Task task;
  ATOLL_RETURN_IF_ERROR(calls_->next_task(req, &task));
  // Also a Task kind this node does not know (transport/unknown_fields.h).
  ATOLL_RETURN_IF_ERROR(transport::refuse_unknown_fields(task, "the task", "the coordinator"));
  return task;
}

StatusOr<PulledParams> CoordinatorClient::pull_params(uint64_t round,
                                                      const std::string& expected_fingerprint,
                                                      const HeldParams* held) {
  pb::PullParamsRequest req;
  req.set_experiment_id(current_experiment_id());
  req.set_round(round);
  if (held) req.set_have_fingerprint(held->fingerprint);
  pb::TensorHeader h;
  // The previous pull's receive buffer, handed back on every way out of here.
  std::string payload = take_pull_buffer();
  struct GiveBack {
    CoordinatorClient& client;
    std::string& buffer;
    ~GiveBack() { client.keep_pull_buffer(std::move(buffer)); }
  } give_back{*this, payload};
  ATOLL_RETURN_IF_ERROR(calls_->pull_params(req, &h, &payload));
  const std::string where = "PullParams from " + calls_->target() + ": ";
  if (h.round() != round)
    return FailedPrecondition("PullParams: asked for round " + std::to_string(round) +
                              ", got round " + std::to_string(h.round()));
  PulledParams out;
  out.bytes = payload.size();
  out.codec = h.codec();
  // An outer update that does not give the announced θ (a node whose copy differs from the
  // coordinator's in any bit) is replaced by the full θ; both payloads count as received.
  auto full_instead = [&]() -> StatusOr<PulledParams> {
    ATOLL_ASSIGN_OR_RETURN(PulledParams full, pull_params(round, expected_fingerprint, nullptr));
    full.bytes += out.bytes;
    return full;
  };
  if (h.codec() == "none") {
    ATOLL_ASSIGN_OR_RETURN(out.values, transport::bytes_to_floats(std::move(payload)));
  } else if (h.codec() == algorithms::compress::exact_delta::kName || h.codec() == "sparse-delta") {
    // A delta against the θ this node named; decoders validate everything before writing.
    if (!held || h.base_fingerprint() != held->fingerprint)
      return FailedPrecondition(where + "a " + h.codec() + " against θ " +
                                h.base_fingerprint().substr(0, 12) +
                                ", which this node does not hold");
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                         payload.size());
    out.values.resize(held->values.size());
    Status d = h.codec() == "sparse-delta"
                   ? algorithms::compress::sparse_delta::decode_into(bytes, held->values, out.values)
                   : algorithms::compress::exact_delta::decode_into(bytes, held->values, out.values);
    if (!d.ok()) return Status(d.code(), where + d.message());
    // An exact delta on an exact base is θ bit for bit; anything lossy stays approximate.
    out.exact = h.codec() != "sparse-delta" && held->exact;
  } else if (h.codec() == algorithms::compress::kOuterUpdateName) {
    // Compressed broadcast: the coordinator's decoded outer update added to the θ this node
    // holds, exactly as the coordinator added it (algorithms/compress/outer_update.h).
    if (!held || h.base_fingerprint() != held->fingerprint || !held->exact)
      return FailedPrecondition(where + "an outer update against θ " +
                                h.base_fingerprint().substr(0, 12) +
                                ", which this node does not hold exactly");
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                         payload.size());
    auto v = algorithms::compress::apply_update_message(bytes, held->values, h.fragment_offset());
    if (!v.ok()) return full_instead();
    out.values = std::move(v).value();
    out.exact = true;  // checked against the announced fingerprint below
  } else if (h.codec() == "bf16") {
    // The whole θ as a dense bf16 codec message (diloco.pull_codec = "bf16"): the decoder checks
    // the checksum, that the message was made by bf16, its numel and that every value is finite.
    ATOLL_ASSIGN_OR_RETURN(auto codec, algorithms::compress::Codec::create("bf16"));
    codec.set_threads(kernels::cpu::num_threads());  // the node's --threads; same values for any
    // 2 bytes a value: a header announcing more values than the payload can hold is refused
    // before anything is allocated for them.
    if (h.numel() > payload.size() / 2)
      return DataLoss(where + "a bf16 θ of " + std::to_string(h.numel()) + " values in " +
                      std::to_string(payload.size()) + " bytes");
    auto v =
        codec.decode({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}, h.numel());
    if (!v.ok()) return Status(v.status().code(), where + v.status().message());
    out.values = std::move(v).value();
    out.exact = false;  // θ_r at bf16 precision
  } else {
    return InvalidArgument("PullParams: unsupported codec '" + h.codec().substr(0, 64) + "'");
  }
  if (out.values.size() != h.numel())
    return DataLoss("PullParams: payload holds " + std::to_string(out.values.size()) +
                    " values, header says " + std::to_string(h.numel()));
  out.round = h.round();
  out.layout_fingerprint = h.layout_fingerprint();
  if (out.exact) {
    // θ's SHA-256 fingerprint proves this copy equal to the coordinator's bit for bit. A raw θ
    // is the coordinator's θ byte for byte (on a little-endian host): the transport checked those
    // bytes against their XXH3-128 (TLS authenticates the sender), so the header's fingerprint is
    // this copy's and θ is not hashed again. A decoded θ (a delta applied, an outer update) is.
    const bool raw_and_checked = h.codec() == "none" && !h.payload_xxh3().empty() &&
                                 std::endian::native == std::endian::little;
    out.fingerprint = raw_and_checked
                          ? h.params_fingerprint()
                          : sha256_hex(out.values.data(), out.values.size() * sizeof(float));
    if (out.fingerprint != h.params_fingerprint() &&
        h.codec() == algorithms::compress::kOuterUpdateName)
      return full_instead();
    if (out.fingerprint != h.params_fingerprint())
      return DataLoss("PullParams: θ fingerprint " + out.fingerprint +
                      " does not match the header's " + h.params_fingerprint());
  } else {
    out.fingerprint = h.params_fingerprint();  // the version told, not a hash of the values
  }
  if (!expected_fingerprint.empty() && out.fingerprint != expected_fingerprint)
    return FailedPrecondition("PullParams: θ of round " + std::to_string(round) + " is " +
                              out.fingerprint + ", the task announced " + expected_fingerprint);
  return out;
}

std::string CoordinatorClient::take_pull_buffer() {
  std::lock_guard<std::mutex> lk(pull_buffer_mu_);
  return std::exchange(pull_buffer_, std::string());
}

void CoordinatorClient::keep_pull_buffer(std::string buffer) {
  std::lock_guard<std::mutex> lk(pull_buffer_mu_);
  if (buffer.capacity() > pull_buffer_.capacity()) pull_buffer_ = std::move(buffer);
}

StatusOr<uint64_t> CoordinatorClient::push_update(const UpdateHeader& header,
                                                  std::span<const float> delta) {
  // Raw little-endian fp32: Δ's own bytes (a little-endian host), sent without a θ-sized copy.
  const std::string_view bytes(reinterpret_cast<const char*>(delta.data()), delta.size_bytes());
  return push_encoded(header, "none", delta.size(), bytes);
}

StatusOr<uint64_t> CoordinatorClient::push_encoded(const UpdateHeader& header,
                                                   const std::string& codec, uint64_t numel,
                                                   std::string_view payload) {
  pb::TensorHeader h;
  h.set_experiment_id(current_experiment_id());
  h.set_round(header.round);
  h.set_codec(codec);
  h.set_numel(numel);
  h.set_layout_fingerprint(header.layout_fingerprint);
  h.set_params_fingerprint(header.base_fingerprint);
  h.set_tokens(header.tokens);
  h.set_train_loss(header.train_loss);
  h.set_fragment_offset(header.fragment_offset);
  h.set_mask_fingerprint(header.mask_fingerprint);
  pb::PushUpdateResponse resp;
  ATOLL_RETURN_IF_ERROR(calls_->push_update(h, payload, &resp));
  if (!resp.accepted()) return FailedPrecondition("PushUpdate not accepted: " + resp.message());
  return static_cast<uint64_t>(payload.size());
}

Status CoordinatorClient::report_metrics(
    uint64_t round, uint64_t step, const std::vector<std::pair<std::string, double>>& metrics) {
  pb::MetricsReport req;
  req.set_experiment_id(current_experiment_id());
  req.set_round(round);
  req.set_step(step);
  for (const auto& [name, value] : metrics) {
    pb::Metric* m = req.add_metrics();
    m->set_name(name);
    m->set_value(value);
  }
  pb::MetricsAck ack;
  return calls_->report_metrics(req, &ack);
}

Status CoordinatorClient::leave(const std::string& reason) {
  pb::LeaveRequest req;
  req.set_experiment_id(current_experiment_id());
  req.set_reason(reason);
  pb::LeaveResponse resp;
  return calls_->leave(req, &resp);
}

Status CoordinatorClient::report_importance(const pb::ImportanceReport& report) {
  pb::ImportanceReport req = report;
  req.set_experiment_id(current_experiment_id());
  pb::ImportanceAck resp;
  ATOLL_RETURN_IF_ERROR(calls_->report_importance(req, &resp));
  if (!resp.accepted()) return InvalidArgument("importance refused: " + resp.message());
  return Status::Ok();
}

StatusOr<pb::SecAggRoster> CoordinatorClient::advertise_keys(pb::SecAggKeys req) {
  req.set_experiment_id(current_experiment_id());
  pb::SecAggRoster resp;
  ATOLL_RETURN_IF_ERROR(calls_->advertise_keys(req, &resp));
  return resp;
}

StatusOr<pb::SecAggShares> CoordinatorClient::share_keys(pb::SecAggShares req) {
  req.set_experiment_id(current_experiment_id());
  pb::SecAggShares resp;
  ATOLL_RETURN_IF_ERROR(calls_->share_keys(req, &resp));
  return resp;
}

StatusOr<pb::SecAggUnmaskTask> CoordinatorClient::await_unmask(pb::SecAggUnmaskPoll req) {
  req.set_experiment_id(current_experiment_id());
  pb::SecAggUnmaskTask resp;
  ATOLL_RETURN_IF_ERROR(calls_->await_unmask(req, &resp));
  return resp;
}

StatusOr<pb::SecAggRevealAck> CoordinatorClient::reveal_shares(pb::SecAggReveal req) {
  req.set_experiment_id(current_experiment_id());
  pb::SecAggRevealAck resp;
  ATOLL_RETURN_IF_ERROR(calls_->reveal_shares(req, &resp));
  return resp;
}

}  // namespace atl::node
