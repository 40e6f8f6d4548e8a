// RoundEngine: pushes. begin_update screens the header (everything that can be checked before
// a byte of payload), finish_update decodes and checks the payload and accepts the update,
// abort_update records a push whose payload never arrived whole. Rejections leave θ untouched.
#include <cmath>

#include "algorithms/compress/codec.h"
#include "algorithms/diloco/outer.h"
#include "coordinator/round_engine.h"
#include "transport/tensor_stream.h"

namespace atl::coordinator {
namespace pb = atoll_pb::v1;

namespace {

// A payload of codec "none" is the raw little-endian fp32 values; any other codec's is a codec
// message for EngineOptions::decode.
bool raw_fp32(const pb::TensorHeader& h) {
  return h.codec() == algorithms::compress::kNoneSpec;
}

// A secure-aggregation input: numel little-endian uint32, masked mod 2^32 (TrainSpec.secagg).
constexpr const char* kSecAggCodec = "secagg";
bool secagg_words(const pb::TensorHeader& h) { return h.codec() == kSecAggCodec; }

}  // namespace

Status RoundEngine::screen_update_locked(const std::string& id, const pb::TensorHeader& h,
                                         const char** reason) {
  const uint64_t r = round_.round;
  const bool in_round = round_.open && h.round() == r && is_participant_locked(id);
  auto refuse = [reason](const char* why, Status st) {
    *reason = why;
    return st;
  };
  if (h.wire_version() != transport::kWireVersion)
    return refuse("wire_version",
                  InvalidArgument("unsupported wire_version " + std::to_string(h.wire_version())));
  if (in_round && round_.updates.count(id))
    return refuse("duplicate", AlreadyExists("replay: an update from '" + id + "' for round " +
                                             std::to_string(h.round()) + " was already accepted"));
  if (in_round && round_.receiving.count(id))
    return refuse("duplicate",
                  AlreadyExists("an update from '" + id + "' for round " +
                                std::to_string(h.round()) + " is already being received"));
  if (!in_round)
    return refuse(
        "stale_round",
        FailedPrecondition(
            "stale round: update for round " + std::to_string(h.round()) + ", but " +
            (committing_ ? "round " + std::to_string(r) +
                               " is closed and being committed (poll NextTask for the next round)"
             : round_.open ? "round " + std::to_string(r) + " is open" +
                                 (is_participant_locked(id) ? "" : " without '" + id + "'")
                           : "no round is open (current round " +
                                 std::to_string(experiment_.current_round) + ")")));
  if (Status st = strategy_->check_update_shape(id, r, h); !st.ok())
    return refuse("wrong_shape", st);
  if (h.layout_fingerprint() != experiment_.layout_fingerprint)
    return refuse("wrong_shape", InvalidArgument("wrong shape: layout fingerprint " +
                                                 short_fp(h.layout_fingerprint()) +
                                                 " does not match the experiment's " +
                                                 short_fp(experiment_.layout_fingerprint)));
  if (h.params_fingerprint() != experiment_.params_fingerprint)
    return refuse(
        "wrong_base",
        FailedPrecondition("wrong base: update was computed from θ " +
                           short_fp(h.params_fingerprint()) + ", round " + std::to_string(r) +
                           " is θ " + short_fp(experiment_.params_fingerprint) + "; pull θ again"));
  if (secagg_words(h) != static_cast<bool>(round_.secagg))
    return refuse("codec",
                  InvalidArgument(round_.secagg
                                      ? "this experiment uses secure aggregation: push codec "
                                        "\"secagg\" (quantized, masked uint32), not \"" +
                                            h.codec().substr(0, 64) + "\""
                                      : "codec \"secagg\" needs [secagg] enabled = true"));
  if (round_.secagg) {
    if (Status st = round_.secagg->check_push(id); !st.ok())
      return refuse(st.code() == StatusCode::kAlreadyExists ? "duplicate" : "stale_round", st);
    if (h.payload_bytes() != h.numel() * sizeof(uint32_t))
      return refuse("wrong_shape", InvalidArgument("wrong shape: codec secagg needs " +
                                                   std::to_string(h.numel() * 4) +
                                                   " payload bytes, header says " +
                                                   std::to_string(h.payload_bytes())));
  }
  if (!round_.secagg && !raw_fp32(h) && !options_.decode)
    return refuse("codec",
                  InvalidArgument("codec '" + h.codec().substr(0, 64) +
                                  "' is not supported by this coordinator (use \"none\")"));
  if (raw_fp32(h) && h.payload_bytes() != h.numel() * sizeof(float))
    return refuse(
        "wrong_shape",
        InvalidArgument("wrong shape: codec none needs " + std::to_string(h.numel() * 4) +
                        " payload bytes, header says " + std::to_string(h.payload_bytes())));
  if (h.tokens() == 0)
    return refuse("bad_header", InvalidArgument("tokens must be > 0 (the aggregation weight)"));
  if (h.tokens() > max_round_tokens_)
    return refuse(
        "bad_header",
        InvalidArgument(
            "tokens = " + std::to_string(h.tokens()) + " is more than a round allows: " +
            std::to_string(config_.diloco.steps_per_round()) + " inner steps × train.batch_size " +
            std::to_string(config_.train.batch_size) + " × model.seq_len " +
            std::to_string(config_.model.seq_len) + " = " + std::to_string(max_round_tokens_) +
            " (the aggregation weight is the tokens a node trained on in the round)"));
  if (!std::isfinite(h.train_loss()))
    return refuse("bad_header", InvalidArgument("train_loss is not finite"));
  return Status::Ok();
}

void RoundEngine::record_rejection_locked(const std::string& id, const pb::TensorHeader& h,
                                          const char* reason, const Status& why) {
  audit("update_rejected", id + " round " + std::to_string(h.round()) + ": " + why.to_string());
  Event e{Event::Kind::kUpdateRejected};
  e.round = h.round();
  e.node_id = id;
  e.message = why.to_string();
  e.reason = reason;
  emit(std::move(e));
}

Status RoundEngine::begin_update(const std::string& id, const pb::TensorHeader& h) {
  std::lock_guard<std::mutex> lk(mu_);
  ATOLL_RETURN_IF_ERROR(member_locked(id, h.experiment_id()));
  const char* reason = "";
  if (Status st = screen_update_locked(id, h, &reason); !st.ok()) {
    record_rejection_locked(id, h, reason, st);
    return st;
  }
  round_.receiving.insert(id);  // the round waits for this payload
  in_flight_[id] = h.SerializeAsString();
  return Status::Ok();
}

void RoundEngine::abort_update(const std::string& id, const pb::TensorHeader& h,
                               const Status& why) {
  abort_update_for(id, h, "transfer", why);
}

void RoundEngine::abort_update_for(const std::string& id, const pb::TensorHeader& h,
                                   const char* reason, const Status& why) {
  std::optional<Commit> commit_job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = in_flight_.find(id);
        it != in_flight_.end() && it->second == h.SerializeAsString())
      in_flight_.erase(it);
    round_.receiving.erase(id);
    record_rejection_locked(id, h, reason, why);
    commit_job = maybe_close_round_locked(Clock::now());
  }
  if (commit_job) commit(std::move(*commit_job));
}

StatusOr<std::vector<float>> RoundEngine::decode_update(const std::string& id,
                                                        const pb::TensorHeader& h,
                                                        const std::string& payload,
                                                        const char** reason) const {
  const uint64_t numel = h.numel();  // θ, the round's fragment or the mask (screened)
  const uint64_t limit = numel * sizeof(float) + options_.payload_slack_bytes;
  *reason = "too_large";
  if (payload.size() > limit)
    return OutOfRange("update payload of " + std::to_string(payload.size()) +
                      " bytes exceeds the limit of " + std::to_string(limit) + " bytes");
  std::vector<float> delta;
  *reason = "codec";
  if (raw_fp32(h)) {
    ATOLL_ASSIGN_OR_RETURN(delta, transport::bytes_to_floats(payload));
  } else {
    ATOLL_ASSIGN_OR_RETURN(delta, options_.decode(h.codec(), payload, numel));
  }
  *reason = "wrong_shape";
  if (delta.size() != numel)
    return InvalidArgument("wrong shape: payload decodes to " + std::to_string(delta.size()) +
                           " elements, the update has " + std::to_string(numel));
  *reason = "not_finite";
  ATOLL_RETURN_IF_ERROR(algorithms::check_finite(
      delta, "update from '" + id + "' for round " + std::to_string(h.round())));
  return delta;
}

StatusOr<pb::PushUpdateResponse> RoundEngine::finish_update(const std::string& id,
                                                            const pb::TensorHeader& h,
                                                            const std::string& payload) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = in_flight_.find(id);
    if (it == in_flight_.end() || it->second != h.SerializeAsString())
      return FailedPrecondition("no update from '" + id + "' for round " +
                                std::to_string(h.round()) +
                                " is being received (begin_update accepts its header first)");
  }
  // Decoded and checked without the lock: a payload is up to numel values. A secagg payload is
  // added to the round's masked sum under the lock instead (never kept on its own).
  const uint64_t bytes = payload.size();
  const char* reason = "";
  StatusOr<std::vector<float>> delta = std::vector<float>{};
  if (secagg_words(h)) {
    if (bytes != h.numel() * sizeof(uint32_t)) {
      reason = "wrong_shape";
      delta = InvalidArgument("wrong shape: a secagg payload of " + std::to_string(bytes) +
                              " bytes, " + std::to_string(h.numel() * 4) + " expected");
    }
  } else {
    delta = decode_update(id, h, payload, &reason);
  }
  if (!delta.ok()) {
    abort_update_for(id, h, reason, delta.status());
    return delta.status();
  }

  std::optional<Commit> commit_job;
  pb::PushUpdateResponse resp;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in_flight_.erase(id);
    round_.receiving.erase(id);
    // The round may have closed or restarted while the payload streamed in.
    if (!(round_.open && round_.round == h.round() && is_participant_locked(id) &&
          h.params_fingerprint() == experiment_.params_fingerprint)) {
      const Status stale = FailedPrecondition("stale round: round " + std::to_string(h.round()) +
                                              " closed while the update was being received");
      audit("update_rejected", id + ": " + stale.to_string());
      Event e{Event::Kind::kUpdateRejected};
      e.round = h.round();
      e.node_id = id;
      e.message = stale.to_string();
      e.reason = "stale_round";
      emit(std::move(e));
      return stale;
    }
    auto indices = strategy_->update_indices(id, h);
    if (!indices.ok()) {
      // The selection changed while the update streamed in.
      audit("update_rejected", id + ": " + indices.status().to_string());
      Event e{Event::Kind::kUpdateRejected};
      e.round = h.round();
      e.node_id = id;
      e.message = indices.status().to_string();
      e.reason = "stale_round";
      emit(std::move(e));
      return indices.status();
    }
    if (round_.secagg) {
      if (Status st = round_.secagg->add_masked(id, payload); !st.ok()) {
        audit("update_rejected", id + ": " + st.to_string());
        return st;
      }
    }
    PendingUpdate& u = round_.updates[id];
    u.indices = std::move(*indices);
    u.delta = std::move(*delta);
    u.tokens = h.tokens();
    u.loss = h.train_loss();
    u.bytes = bytes;
    const std::string progress = std::to_string(round_.updates.size()) + " of " +
                                 std::to_string(round_.participants.size()) + " updates";
    Event e{Event::Kind::kUpdateAccepted};
    e.round = h.round();
    e.node_id = id;
    e.message = progress;
    emit(std::move(e));
    resp.set_accepted(true);
    resp.set_message("accepted update for round " + std::to_string(h.round()) + " (" + progress +
                     ")");
    commit_job = maybe_close_round_locked(Clock::now());
  }
  // The update that completes the round commits it on this thread, without the lock.
  if (commit_job) commit(std::move(*commit_job));
  return resp;
}

}  // namespace atl::coordinator
