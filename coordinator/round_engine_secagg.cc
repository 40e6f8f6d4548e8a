// RoundEngine: the secure-aggregation stages of a round ([secagg], coordinator/secagg_round.h).
// The node calls long-poll on the engine's condition variable like next_task; the stage
// transitions run wherever the round's state changes (a call, a lost node, the ticker at the
// deadline), and the commit unmasks the sum without the lock.
#include <algorithm>

#include "coordinator/round_engine.h"
#include "kernels/core/number_text.h"

namespace atl::coordinator {
namespace pb = atoll_pb::v1;

StatusOr<SecAggRound*> RoundEngine::secagg_round_locked(const std::string& id, uint64_t round) {
  if (!config_.secagg.enabled)
    return FailedPrecondition("experiment '" + experiment_id_ +
                              "' does not use secure aggregation ([secagg] enabled = false)");
  if (!round_.open || !round_.secagg || round_.round != round || !is_participant_locked(id))
    return FailedPrecondition(
        "stale round: secagg call for round " + std::to_string(round) + ", but " +
        (committing_ ? "round " + std::to_string(round_.round) + " is being committed"
         : round_.open
             ? "round " + std::to_string(round_.round) + " is open" +
                   (is_participant_locked(id) ? "" : " without '" + id + "'")
             : "no round is open (current round " + std::to_string(experiment_.current_round) +
                   ")") +
        "; poll NextTask");
  return round_.secagg.get();
}

std::optional<RoundEngine::Commit> RoundEngine::advance_secagg_locked(Clock::time_point now) {
  SecAggRound& sa = *round_.secagg;
  const SecAggRound::Stage before = sa.stage();
  auto live = [this](const std::string& id) {
    auto it = nodes_.find(id);
    return it != nodes_.end() && it->second.status == NodeStatus::kActive;
  };
  const bool deadline_passed = now >= round_.deadline;
  const std::optional<std::string> failed =
      sa.advance(live, deadline_passed, !round_.receiving.empty());
  if (failed) {
    // Before the deadline a stage fails only when the sites it waits for were lost or left.
    restart_round_locked(
        *failed +
        (deadline_passed
             ? " before the " + shortest_decimal(config_.diloco.round_deadline_s) + " s deadline"
             : " (the others were lost or left)") +
        "; the round starts again with new keys");
    return std::nullopt;
  }
  if (std::optional<std::string> note = sa.take_deadline_note()) {
    // The sites kept get round_deadline_s for the rest of the round: the next stage cannot have
    // begun before the one it follows closed.
    round_.deadline = now + duration_of_seconds(config_.diloco.round_deadline_s);
    round_.deadline_unix_ms =
        unix_ms_now() + static_cast<uint64_t>(config_.diloco.round_deadline_s * 1000.0);
    audit("secagg_deadline", *note);
    Event e{Event::Kind::kSecAggDeadline};
    e.round = round_.round;
    e.message = std::move(*note);
    emit(std::move(e));
  }
  if (sa.stage() != before) {
    audit("secagg_stage", "round " + std::to_string(round_.round) + " stage " +
                              std::to_string(static_cast<int>(sa.stage())) + " (threshold " +
                              std::to_string(sa.threshold()) + ")");
    cv_.notify_all();
  }
  if (sa.stage() != SecAggRound::Stage::kReady) return std::nullopt;
  // Participants whose masked input is not in the sum leave the round's record as not pushed.
  std::shared_ptr<SecAggRound> keep = round_.secagg;
  SecAggRound::Result result = keep->take_result();
  Commit c = prepare_commit_locked(now);
  c.secagg = std::move(result);
  return c;
}

void RoundEngine::node_process_restarted(const std::string& id) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!round_.open || !round_.secagg || !is_participant_locked(id)) return;
  round_.secagg->process_restarted(id);
  if (round_.secagg->departed(id))
    audit("secagg_departed", "round " + std::to_string(round_.round) + ": a new process of " + id +
                                 " joined after the roster was fixed; it takes part from the next "
                                 "round");
  if (std::optional<Commit> job = advance_secagg_locked(Clock::now())) {
    lk.unlock();
    commit(std::move(*job));
    return;
  }
  cv_.notify_all();
}

Status RoundEngine::unmask_into_updates(Commit& c) const {
  SecAggRound::Result& r = *c.secagg;
  std::vector<uint32_t> sum;
  if (r.masking) {
    ATOLL_ASSIGN_OR_RETURN(sum, algorithms::secagg::unmask(std::move(r.unmask)));
  } else {
    sum = std::move(r.unmask.masked_sum);
  }
  // One update: the equal-weight mean of the dequantized inputs of the r.sites that pushed.
  PendingUpdate mean;
  mean.delta.resize(sum.size());
  algorithms::secagg::dequantize_mean(
      sum, r.sites,
      {.clip_range = config_.secagg.clip_range,
       .quantization_range = config_.secagg.quantization_range},
      mean.delta);
  mean.tokens = 1;
  c.updates.clear();
  c.updates.emplace("secagg-sum", std::move(mean));
  c.secagg.reset();
  return Status::Ok();
}

template <class Answer, class Accept, class Fill>
StatusOr<Answer> RoundEngine::secagg_stage(std::unique_lock<std::mutex>& lk,
                                           const std::string& id, uint64_t round,
                                           uint32_t wait_ms, Accept accept, Fill fill) {
  ATOLL_ASSIGN_OR_RETURN(SecAggRound * sa, secagg_round_locked(id, round));
  // A refused call can still close a stage (a restarted site departs: no one waits for it).
  const Status accepted = accept(*sa);
  if (std::optional<Commit> job = advance_secagg_locked(Clock::now())) {
    // Only a stage with every input in can complete the sum; never these two, but a Commit
    // must not be dropped.
    lk.unlock();
    commit(std::move(*job));
    lk.lock();
  }
  if (!accepted.ok()) return accepted;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::min(wait_ms, options_.max_wait_ms));
  NodeState& n = nodes_[id];
  ++n.polling;
  Answer out;
  Status result;
  for (;;) {
    auto open = secagg_round_locked(id, round);
    if (!open.ok()) {
      result = open.status();
      break;
    }
    out.Clear();
    fill(**open, out);
    if (out.complete() || cv_.wait_until(lk, deadline) == std::cv_status::timeout) break;
  }
  --n.polling;
  n.last_seen = Clock::now();
  if (!result.ok()) return result;
  return out;
}

StatusOr<pb::SecAggRoster> RoundEngine::advertise_keys(const std::string& id,
                                                       const pb::SecAggKeys& req,
                                                       const std::string& certificate_pem) {
  std::unique_lock<std::mutex> lk(mu_);
  ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
  ATOLL_ASSIGN_OR_RETURN(
      pb::SecAggRoster out,
      secagg_stage<pb::SecAggRoster>(
          lk, id, req.round(), req.wait_ms(),
          [&](SecAggRound& sa) {
            Status st = sa.advertise(id, req, certificate_pem);
            if (!st.ok()) audit("secagg_rejected", id + " advertise: " + st.to_string());
            return st;
          },
          [&](SecAggRound& sa, pb::SecAggRoster& r) { sa.fill_roster(id, r); }));
  if (out.complete() && out.self_index() == 0)
    return FailedPrecondition("round " + std::to_string(req.round()) +
                              ": the secagg roster was fixed without '" + id + "'");
  return out;
}

StatusOr<pb::SecAggShares> RoundEngine::share_keys(const std::string& id,
                                                   const pb::SecAggShares& req) {
  std::unique_lock<std::mutex> lk(mu_);
  ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
  return secagg_stage<pb::SecAggShares>(
      lk, id, req.round(), req.wait_ms(),
      [&](SecAggRound& sa) {
        Status st = sa.share(id, req);
        if (!st.ok()) audit("secagg_rejected", id + " share: " + st.to_string());
        return st;
      },
      [&](SecAggRound& sa, pb::SecAggShares& r) { sa.fill_shares_for(id, r); });
}

StatusOr<pb::SecAggUnmaskTask> RoundEngine::await_unmask(const std::string& id,
                                                         const pb::SecAggUnmaskPoll& req) {
  std::unique_lock<std::mutex> lk(mu_);
  ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
  if (!config_.secagg.enabled)
    return FailedPrecondition("experiment '" + experiment_id_ +
                              "' does not use secure aggregation ([secagg] enabled = false)");
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::min(req.wait_ms(), options_.max_wait_ms));
  NodeState& n = nodes_[id];
  ++n.polling;
  pb::SecAggUnmaskTask out;
  for (;;) {
    out.Clear();
    out.set_round(req.round());
    if (stopping_ || !round_.open || !round_.secagg || round_.round != req.round() ||
        !is_participant_locked(id)) {
      // Committed, being committed, or restarted: nothing is asked of this site any more.
      out.set_done(true);
      out.set_reason(committing_ || experiment_.current_round > req.round()
                         ? "round " + std::to_string(req.round()) + " is unmasked"
                         : "round " + std::to_string(req.round()) + " is no longer open");
      break;
    }
    round_.secagg->fill_unmask_task(id, out);
    if (out.ready() || out.done() || cv_.wait_until(lk, deadline) == std::cv_status::timeout)
      break;
  }
  --n.polling;
  n.last_seen = Clock::now();
  return out;
}

StatusOr<pb::SecAggRevealAck> RoundEngine::reveal_shares(const std::string& id,
                                                         const pb::SecAggReveal& req) {
  std::optional<Commit> commit_job;
  pb::SecAggRevealAck ack;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
    auto sa = secagg_round_locked(id, req.round());
    if (!sa.ok()) {
      // Unmasked already with others' shares, or abandoned: not an error of this site.
      ack.set_accepted(false);
      ack.set_message(sa.status().message());
      return ack;
    }
    if (Status st = (*sa)->reveal(id, req); !st.ok()) {
      audit("secagg_rejected", id + " reveal: " + st.to_string());
      return st;
    }
    ack.set_accepted(true);
    ack.set_message("shares for round " + std::to_string(req.round()) + " taken");
    commit_job = advance_secagg_locked(Clock::now());
  }
  if (commit_job) commit(std::move(*commit_job));
  return ack;
}

}  // namespace atl::coordinator
