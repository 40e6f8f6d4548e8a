// The rounds of ONE experiment, without any transport: membership, synchronous rounds, quorum,
// deadlines, screening of updates, aggregation, the outer step and the commit to the store. The
// gRPC service (coordinator/service.h) is glue over it; an in-process simulator can drive it
// directly with the same messages.
//
// Rounds. θ_r is the parameters at the start of round r. A round starts when at least
// diloco.min_nodes live nodes are ready (waiting in next_task): immediately once every live
// node is ready, otherwise after diloco.start_wait_s. Each participant gets a TRAIN task, pulls
// θ_r, trains and pushes Δᵢ = θ_r − θᵢ. The round closes when every live participant has
// pushed, or at the deadline once min_nodes updates are in; then screening (each update's norm
// against the round's limit, coordinator/update_screening.h), Δ = Σ wᵢΔᵢ / Σ wᵢ (sorted node
// order, wᵢ = tokens, at most what a round allows) or the experiment's robust aggregator, the
// outer Nesterov step (never a non-finite θ: offending updates are left out, or the round is
// skipped), and ONE atomic store commit of θ_{r+1}, momentum, round record and round pointer. A
// round that cannot reach quorum (deadline passed, or every live participant done) is restarted
// with θ_r unchanged. What differs between DiLoCo, Streaming DiLoCo and Hydra is a RoundStrategy
// (coordinator/round_strategy.h), chosen at open.
//
// The commit. Closing a round takes its updates out under the lock and marks it committing;
// the aggregation, outer step, fingerprints and the synced store write then run WITHOUT the
// lock, on the thread that closed the round, so heartbeats, polls and pulls keep being
// answered (an update for the committing round is refused as stale). The result is published
// under the lock: θ_{r+1} and the next round, or, when the commit failed, nothing changes and
// the round is done again (a store that cannot be written pauses the experiment until a probe
// write succeeds; nothing makes an experiment fail). Lifecycle changes (start, pause, stop) wait
// for a commit in progress.
//
// Pulls: coordinator/pull_planner.h. With a compressed broadcast (diloco.pull_codec names a
// codec, algorithms/compress/outer_update.h) the commit also encodes the outer update with the
// engine's error feedback: θ_{r+1} is θ_r plus the decoded update, and the error feedback and
// the update message are written in the round's batch.
//
// Threads. Callers' threads (one per node call), one ticker thread (deadlines, lost nodes,
// delayed starts) and one event thread (delivers Events to the callback in order and writes the
// audit log, never under the engine lock). State is guarded by one mutex; long-polls wait on a
// condition variable with a deadline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "algorithms/model/param_set.h"
#include "coordinator/engine_types.h"
#include "coordinator/experiment_config.h"
#include "coordinator/pull_planner.h"
#include "coordinator/round_strategy.h"
#include "coordinator/secagg_round.h"
#include "coordinator/store.h"
#include "coordinator/update_screening.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::coordinator {

struct EngineOptions {
  // next_task holds a call at most this long, whatever the node asks for (ms).
  uint32_t max_wait_ms = 30000;
  // The sites' tokenizer when the launch knows it (a LoRA base's, an --init-from checkpoint's);
  // unset: the first node to join with one sets it. A node that reports another is refused.
  std::optional<SiteTokenizer> tokenizer;
  // Called for every Event, in order, on the engine's event thread. May be empty.
  std::function<void(const Event&)> on_event;
  // Decodes update payloads of codecs other than "none". Empty: codec "none" only.
  PayloadDecoder decode;
  // Slack over numel·4 bytes accepted for encoded payloads (headers of compressed codecs).
  uint64_t payload_slack_bytes = 1 << 16;
};

// OK iff `name` can name a node: valid_id (store.h).
Status check_node_name(const std::string& name);

class RoundEngine {
 public:
  // Opens experiment `config.name`: resumes its last committed round when the store has it
  // (the layout fingerprint and numel must match `initial`), otherwise creates it with θ_0 =
  // initial (state "created"). The store must outlive the engine.
  static StatusOr<std::unique_ptr<RoundEngine>> open(Store& store, const ExperimentConfig& config,
                                                     const algorithms::ParamSet& initial,
                                                     EngineOptions options = {});
  ~RoundEngine();
  RoundEngine(const RoundEngine&) = delete;
  RoundEngine& operator=(const RoundEngine&) = delete;

  // Lifecycle: created|paused → running; running → paused (open rounds continue to collect
  // updates, no new round starts); finished is final. A store that cannot be written pauses a
  // running experiment and resumes it once it can; start() then answers UNAVAILABLE. Nothing
  // enters failed any more (a store written by an earlier version may hold it: final).
  Status start();
  Status pause();
  // created|running|paused → finished, for good: no new round starts, an open round is
  // abandoned (its updates are discarded, θ stays at the last commit) and nodes get STOP.
  Status stop(const std::string& why);
  // Wakes every long-poll and refuses new calls (UNAVAILABLE).
  void shutdown();

  const std::string& experiment_id() const { return experiment_id_; }
  const ExperimentConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  ExperimentState state() const;
  uint64_t current_round() const;
  std::string params_fingerprint() const;
  std::vector<float> params() const;        // copy of θ_current
  std::vector<NodeSnapshot> nodes() const;  // sorted by node id
  // Waits until the experiment is finished or failed; DEADLINE_EXCEEDED otherwise.
  StatusOr<ExperimentState> wait_until_finished(Clock::time_point deadline) const;
  // Waits until current_round() ≥ round (or a final state); false at the deadline.
  bool wait_for_round(uint64_t round, Clock::time_point deadline) const;
  // Hydra: the subnetwork (text form, algorithms/model/subnet.h) each node was assigned by the
  // latest selection, sorted by node id; empty before the first selection or without Hydra.
  std::vector<std::pair<std::string, std::string>> hydra_subnets() const;

  // ---- Node calls (transport/proto/atoll.proto). node_id is the authenticated caller. ----
  // What every call checks first: UNAVAILABLE while shutting down, NOT_FOUND for another
  // experiment id ("" means this one). Transports check it before they authenticate.
  Status admits(const std::string& experiment_id) const;
  StatusOr<atoll_pb::v1::JoinResponse> join(const std::string& node_id,
                                            const atoll_pb::v1::JoinRequest& req);
  // known = false (not an error) for a node that is not a member: it should join again.
  StatusOr<atoll_pb::v1::HeartbeatResponse> heartbeat(const std::string& node_id,
                                                      const atoll_pb::v1::HeartbeatRequest& req);
  // Long-polls up to min(req.wait_ms, max_wait_ms); `cancelled` (may be empty) is polled
  // whenever the state changes.
  StatusOr<atoll_pb::v1::Task> next_task(const std::string& node_id,
                                         const atoll_pb::v1::NextTaskRequest& req,
                                         const std::function<bool()>& cancelled = {});
  // What to stream for θ of req.round() (the current round).
  StatusOr<PullPlan> pull(const std::string& node_id, const atoll_pb::v1::PullParamsRequest& req,
                          PullDigest digest = PullDigest::kUpFront);
  // A new process of `node` joined (the service tells by its session id): a securely aggregated
  // round in progress stops waiting for the old process's keys (SecAggRound::process_restarted).
  void node_process_restarted(const std::string& node_id);
  // The pull of `round` reached the node: payload_bytes count as the round's bytes_down.
  void pull_delivered(const std::string& node_id, uint64_t round, uint64_t payload_bytes);
  // A push: begin_update screens the header (the node is then receiving, and the round waits
  // for it), then either finish_update with the whole payload, or abort_update with why the
  // payload did not arrive. Rejections are audited, reported as events and leave θ untouched.
  // The header is the one a transport sends (transport/tensor_stream.h): wire_version and
  // payload_bytes set; its payload_xxh3 is the transport's to check. finish_update returns
  // once the update is accepted, and when it completed the round, once the round is committed.
  Status begin_update(const std::string& node_id, const atoll_pb::v1::TensorHeader& header);
  StatusOr<atoll_pb::v1::PushUpdateResponse> finish_update(const std::string& node_id,
                                                           const atoll_pb::v1::TensorHeader& header,
                                                           const std::string& payload);
  void abort_update(const std::string& node_id, const atoll_pb::v1::TensorHeader& header,
                    const Status& why);
  Status report_metrics(const std::string& node_id, const atoll_pb::v1::MetricsReport& req);
  Status report_importance(const std::string& node_id, const atoll_pb::v1::ImportanceReport& req);
  Status leave(const std::string& node_id, const atoll_pb::v1::LeaveRequest& req);
  // The node's certificate was revoked (`why`: which serial, which list): it stops being a
  // member at once. When it already gave the open round anything (an update, a push under
  // way, importance scores, or any stage of secure aggregation), the round starts again
  // without it, so nothing it sent reaches θ. Audited and reported as kNodeRevoked. A node
  // that is not an active member is left as it is. `refusal`: what the node's calls get from
  // then on, one of them already waiting included ("" = a line made of `why`); the service
  // gives the revocation list's own line, the one a new call of that certificate gets.
  void revoke_node(const std::string& node_id, const std::string& why,
                   const std::string& refusal = "");

  // ---- Secure aggregation ([secagg], coordinator/secagg_round.h). Each long-polls up to
  // min(req.wait_ms, max_wait_ms) for its stage to close; FAILED_PRECONDITION when the round is
  // not the caller's open secagg round (restarted, committed, or secagg off). ----
  // `certificate_pem`: the node's mTLS certificate, forwarded to the other sites with its
  // signed keys ("" without mTLS).
  StatusOr<atoll_pb::v1::SecAggRoster> advertise_keys(const std::string& node_id,
                                                      const atoll_pb::v1::SecAggKeys& req,
                                                      const std::string& certificate_pem = "");
  StatusOr<atoll_pb::v1::SecAggShares> share_keys(const std::string& node_id,
                                                  const atoll_pb::v1::SecAggShares& req);
  StatusOr<atoll_pb::v1::SecAggUnmaskTask> await_unmask(const std::string& node_id,
                                                        const atoll_pb::v1::SecAggUnmaskPoll& req);
  // Returns once the shares are taken, and when they completed the round, once it is committed.
  StatusOr<atoll_pb::v1::SecAggRevealAck> reveal_shares(const std::string& node_id,
                                                        const atoll_pb::v1::SecAggReveal& req);

 private:
  enum class NodeStatus { kActive, kLost, kLeft, kRevoked };
  struct NodeState {
    NodeStatus status = NodeStatus::kActive;
    std::string revoked_why;  // kRevoked: the line its calls are refused with
    Clock::time_point last_seen;
    int polling = 0;     // next_task calls in flight: a polling node is alive
    // Pulls streaming to it (PullPlan::in_flight): alive too. On a slow link a heartbeat waits
    // behind θ on the same connection, and a pull outlasting the loss window was cut by a
    // "lost" verdict, the round redone, and so on for ever.
    int pulling = 0;
    bool ready = false;  // polled since it was last assigned a round
    NodeRecord record;
    atoll_pb::v1::HeartbeatRequest progress;  // latest heartbeat
  };
  struct Round {
    bool open = false;
    uint64_t round = 0;
    std::vector<std::string> participants;  // sorted
    PendingUpdates updates;
    std::set<std::string> receiving;  // header accepted, payload in flight
    std::map<std::string, uint64_t> bytes_down;
    Clock::time_point started;
    Clock::time_point deadline;
    uint64_t deadline_unix_ms = 0;
    // The round first collects importance scores (SCORE tasks), then selects and trains.
    bool scoring = false;
    std::map<std::string, algorithms::hydra::UnitScores> scores;
    // [secagg] on: the round's key exchange, masked sum and unmasking.
    std::shared_ptr<SecAggRound> secagg;
  };
  // A closed round on its way to the store, prepared under the lock and computed without it.
  struct Commit {
    uint64_t round = 0;
    PendingUpdates updates;
    RoundRecord record;     // all but the fingerprints and the commit time
    ExperimentRecord next;  // round pointer r + 1 and state; all but params_fingerprint
    std::shared_ptr<const std::vector<float>> theta, momentum;  // θ_r and its momentum
    bool has_momentum = false;
    // Compressed broadcast: e_r (numel; null without one), then e_{r+1} after the commit.
    std::shared_ptr<const std::vector<float>> feedback;
    bool stepped = false;  // an outer step was applied (false: the round was skipped)
    // Replay and stale-update detection: the screening memory before, then after the commit.
    std::shared_ptr<const ScreeningMemory> screening;
    // What the strategy's later rounds depend on (RoundStrategy::committed_state), as it is
    // after this round's scoring phase: committed with θ_{r+1}.
    std::string strategy_state;
    // [secagg]: the masked sum and the shares to unmask it; `updates` then hold the records only.
    std::optional<SecAggRound::Result> secagg;
    double commit_s = 0.0;  // close to durable commit (Event::commit_s)
  };
  // A line of the audit log, written by the event thread.
  struct AuditLine {
    std::string event, detail;
  };

  RoundEngine(Store& store, ExperimentConfig config, EngineOptions options,
              std::unique_ptr<RoundStrategy> strategy, PullPolicy policy);

  // The caller's node, which must be an active member (marks it seen); error otherwise.
  Status member_locked(const std::string& node_id, const std::string& experiment_id);
  Status check_experiment(const std::string& experiment_id) const;

  // Round state machine (round_engine.cc); all *_locked run under mu_.
  void maybe_start_round_locked(Clock::time_point now);
  // Closes the open round when it is complete or past its deadline. A returned Commit must be
  // passed to commit() once the lock is released.
  [[nodiscard]] std::optional<Commit> maybe_close_round_locked(Clock::time_point now);
  Commit prepare_commit_locked(Clock::time_point now);
  // Aggregates, steps, hashes and writes the store without the lock, then publishes under it.
  void commit(Commit c);
  // outer: the aggregation and outer step; written: the store commit (OK when not tried).
  void publish_commit_locked(Commit& c, const Status& outer, const Status& written);
  void restart_round_locked(const std::string& why);
  void finish_scoring_locked();
  void check_lost_locked(Clock::time_point now);
  // The node stops being a member (lost, left or revoked; `why` says so in the event and the
  // audit log): its state is stored and the event emitted. The caller closes or restarts the
  // round.
  void end_membership_locked(const std::string& id, NodeStatus status, const std::string& why);
  // The state in memory, then in the store; a store that refuses it blocks (below).
  void set_state_locked(ExperimentState s, const std::string& why);
  // The store refused a write: one kStore line (the first time), and a running experiment is
  // paused in memory until probe_store gets a write through (every kStoreProbeInterval, from
  // the ticker; it releases `lk` for the store's I/O), which resumes it.
  void store_blocked_locked(const Status& why);
  void probe_store(std::unique_lock<std::mutex>& lk, Clock::time_point now);
  // Lifecycle changes wait for a commit in progress (its record carries the state).
  void wait_commit_done(std::unique_lock<std::mutex>& lk) const;
  bool is_participant_locked(const std::string& node) const;
  // The checks of an update's header; on an error *reason gets its word
  // (update_rejection_reasons()).
  Status screen_update_locked(const std::string& node_id, const atoll_pb::v1::TensorHeader& h,
                              const char** reason);
  StatusOr<std::vector<float>> decode_update(const std::string& node_id,
                                             const atoll_pb::v1::TensorHeader& h,
                                             const std::string& payload, const char** reason) const;
  // Records a rejected update: audit line and event (with its reason word).
  void record_rejection_locked(const std::string& node_id, const atoll_pb::v1::TensorHeader& h,
                               const char* reason, const Status& why);
  // abort_update with the reason word of why the payload was refused.
  void abort_update_for(const std::string& node_id, const atoll_pb::v1::TensorHeader& h,
                        const char* reason, const Status& why);
  // Screens the closed round's updates, applies the outer step so that θ_{r+1} is finite, and
  // records both in the round record (without the lock; update_screening.h).
  Status screen_and_step(Commit& c, std::vector<float>& theta_next,
                         std::vector<float>& momentum_next);
  // Compressed broadcast, after the outer step: theta_next (θ_candidate in) becomes θ_r plus
  // the decoded update; feedback_next gets e_{r+1} and message round r's update message (empty
  // for a skipped round). Without the lock.
  Status compress_update(const Commit& c, std::vector<float>& theta_next,
                         std::vector<float>& feedback_next, std::vector<uint8_t>& message) const;
  // ReportMetrics checks that need the engine's state: the round window and the per-round
  // count of reports of `node_id`.
  Status admit_metrics_locked(const std::string& node_id, uint64_t round);
  // [secagg]: the open round's stage transitions; a Commit when the sum is ready.
  [[nodiscard]] std::optional<Commit> advance_secagg_locked(Clock::time_point now);
  // The open secagg round of `round` with `node_id` a participant, or why not.
  StatusOr<SecAggRound*> secagg_round_locked(const std::string& node_id, uint64_t round);
  // [secagg] stages that long-poll: hands `accept` (the node's input) to the open round, moves
  // the stages on, then waits under `lk` (at most wait_ms, capped by max_wait_ms; the node counts
  // as alive meanwhile) until `fill` says the answer is complete.
  template <class Answer, class Accept, class Fill>
  StatusOr<Answer> secagg_stage(std::unique_lock<std::mutex>& lk, const std::string& node_id,
                                uint64_t round, uint32_t wait_ms, Accept accept, Fill fill);
  // [secagg]: the mean of the quantized updates (unmasked) as the single update of the commit.
  Status unmask_into_updates(Commit& c) const;
  void ticker_loop();
  void emit(Event e);
  void audit(const std::string& event, const std::string& detail);
  void event_loop();
  // Records θ of `round` (fingerprint fp) as pullable as a delta base; forgets versions the
  // store no longer keeps.
  void remember_version_locked(uint64_t round, const std::string& fp);
  void fill_join_response(const std::string& node_id, atoll_pb::v1::JoinResponse& resp) const;
  // Join: OK when the site reads with the experiment's tokenizer (the first to report one sets
  // it); FAILED_PRECONDITION naming both otherwise.
  Status check_site_tokenizer_locked(const std::string& id, const atoll_pb::v1::DataProfile& data);
  Status check_optimizer_capability(const std::string& node_id,
                                    const atoll_pb::v1::Capabilities& caps) const;

  Store& store_;
  const ExperimentConfig config_;
  const EngineOptions options_;
  const std::string experiment_id_;
  const Clock::duration heartbeat_interval_;
  const Clock::duration lost_timeout_;
  const std::unique_ptr<RoundStrategy> strategy_;  // guarded by mu_ (apply() excepted)
  // The most tokens a node can have trained on in one round: steps_per_round × batch_size ×
  // seq_len (saturating). A push claiming more is refused; the aggregation weight is the claim.
  const uint64_t max_round_tokens_;
  PullPlanner pulls_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any state change: rounds, nodes, lifecycle, shutdown
  bool stopping_ = false;
  bool committing_ = false;  // round_.round is being committed
  // The store refused a write and no probe has got one through since (store_blocked_locked).
  static constexpr Clock::duration kStoreProbeInterval = std::chrono::seconds(1);
  // Free bytes the store needs before a paused-for-full-disk experiment resumes: one commit.
  uint64_t commit_space_bytes() const;
  bool store_blocked_ = false;
  // A refused write found the disk full since the block began: resume only with room for a
  // commit (commit_space_bytes).
  bool store_full_ = false;
  bool paused_by_store_ = false;  // paused by store_blocked_locked: resumes when it unblocks
  Clock::time_point next_store_probe_{};
  ExperimentRecord experiment_;                         // as committed (+ lifecycle changes)
  std::shared_ptr<const std::vector<float>> theta_;     // θ_current, immutable once published
  std::shared_ptr<const std::vector<float>> momentum_;  // numel; meaningful when has_momentum_
  bool has_momentum_ = false;
  // The compressed broadcast's error feedback e_current (numel); null without one.
  std::shared_ptr<const std::vector<float>> feedback_;
  // Replay and stale-update detection: the screening memory as committed (never null).
  std::shared_ptr<const ScreeningMemory> screening_;
  std::map<std::string, NodeState> nodes_;  // sorted by node id
  // The nodes active when the previous coordinator process stopped, and until when their seats
  // (at diloco.max_nodes) are kept for them: a restart must not give a member's seat to a site
  // that was waiting outside (it did, and the member gave up). Guarded by mu_.
  std::map<std::string, Clock::time_point> seats_kept_;
  // What every site reads its data with: the launch's (options_.tokenizer) or the first joiner's.
  std::optional<SiteTokenizer> site_tokenizer_;
  Round round_;
  std::optional<Clock::time_point> quorum_since_;  // min_nodes ready, waiting for the rest
  // θ versions a pull may name as its base: fingerprint → round (the newest keep_params).
  std::map<std::string, uint64_t> versions_;
  // Pushes between begin_update and finish/abort_update: node → the header it began with.
  std::map<std::string, std::string> in_flight_;
  // Metrics reports accepted per node and round, for rounds inside the window only.
  std::map<std::string, std::map<uint64_t, uint32_t>> metrics_reports_;
  // Pulls delivered outside their round (pull_delivered), per node, until the next record
  // (RoundRecord::late_bytes_down) takes them.
  std::map<std::string, uint64_t> late_bytes_down_;

  std::mutex event_mu_;
  std::condition_variable event_cv_;
  std::deque<std::variant<Event, AuditLine>> outbox_;
  bool events_stop_ = false;

  std::thread ticker_;
  std::thread event_thread_;
};

}  // namespace atl::coordinator
