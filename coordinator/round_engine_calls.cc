// RoundEngine: the node calls other than pushes (join, heartbeat, next_task, pull, metrics,
// importance, leave). Each validates everything it receives before touching state.
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <iterator>

#include "coordinator/round_engine.h"
#include "kernels/core/build_info.h"

namespace atl::coordinator {
namespace pb = atoll_pb::v1;

namespace {

// ReportMetrics bounds: what one report may hold, and how many reports a node may store per
// round. Nodes report once per round, for the round they just pushed (by then the current round
// may have moved on), so the window looks back only. Together they bound what a node can add to
// the store: window × reports × metrics × name length per node.
constexpr size_t kMaxMetrics = 64;
constexpr size_t kMaxMetricName = 64;
constexpr uint64_t kMetricsRoundWindow = 8;  // round ∈ [current − window, current]
constexpr uint32_t kMaxReportsPerRound = 4;

// 1-64 characters of [A-Za-z0-9._/-].
bool valid_metric_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxMetricName) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '/' || c == '-'))
      return false;
  return true;
}

}  // namespace

Status check_node_name(const std::string& name) {
  if (!valid_id(name)) return InvalidArgument("node name '" + name.substr(0, 80) + "' " + kIdRule);
  return Status::Ok();
}

Status RoundEngine::check_experiment(const std::string& experiment_id) const {
  if (experiment_id.empty() || experiment_id == experiment_id_) return Status::Ok();
  return NotFound("unknown experiment '" + experiment_id.substr(0, 80) +
                  "'; this coordinator runs '" + experiment_id_ + "'");
}

Status RoundEngine::admits(const std::string& experiment_id) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return Unavailable("coordinator is shutting down; reconnect later");
  }
  return check_experiment(experiment_id);
}

namespace {

// A node's JoinRequest.client_version for the log: printable ASCII, at most 64 characters;
// "an unnamed build" when it sends none.
std::string printable_version(const std::string& sent) {
  std::string out;
  for (char c : sent.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out.empty() ? "an unnamed build" : out;
}

}  // namespace

Status RoundEngine::member_locked(const std::string& id, const std::string& experiment_id) {
  if (stopping_) return Unavailable("coordinator is shutting down; reconnect later");
  ATOLL_RETURN_IF_ERROR(check_experiment(experiment_id));
  auto it = nodes_.find(id);
  if (it != nodes_.end() && it->second.status == NodeStatus::kRevoked)
    return PermissionDenied(it->second.revoked_why);
  if (it == nodes_.end() || it->second.status != NodeStatus::kActive)
    return NotFound("node '" + id + "' is not an active member of experiment '" + experiment_id_ +
                    "' (never joined, lost or left); Join again");
  it->second.last_seen = Clock::now();
  return Status::Ok();
}

// A node that cannot train the experiment's inner optimizer is refused at the join: one built
// before TrainSpec.optimizer would ignore the field and train AdamW without a word.
Status RoundEngine::check_optimizer_capability(const std::string& id,
                                               const pb::Capabilities& caps) const {
  if (caps.optimizers_size() > 16)
    return InvalidArgument("capabilities.optimizers lists more than 16 names");
  if (caps.features_size() > 16)
    return InvalidArgument("capabilities.features lists more than 16 names");
  for (const std::string& name : caps.optimizers())
    if (name.size() > 32) return InvalidArgument("capabilities.optimizers has a name over 32 bytes");
  if (inner_optimizer(config_) == algorithms::InnerOptimizer::kAdamW) return Status::Ok();
  const std::string& want = config_.train.optimizer;
  for (const std::string& name : caps.optimizers())
    if (name == want) return Status::Ok();
  return FailedPrecondition("site '" + id + "' cannot train with train.optimizer = \"" + want +
                            "\" (its atoll predates it or lacks it): upgrade that node, or set "
                            "train.optimizer = \"adamw\"");
}

StatusOr<pb::JoinResponse> RoundEngine::join(const std::string& id, const pb::JoinRequest& req) {
  ATOLL_RETURN_IF_ERROR(check_node_name(id));
  const double budget = req.budget() == 0 ? 1.0 : req.budget();
  if (!(budget > 0 && budget <= 1))
    return InvalidArgument("budget " + std::to_string(req.budget()) + " must be in (0, 1]");
  if (req.capabilities().device().size() > 64)
    return InvalidArgument("capabilities.device is longer than 64 characters");
  ATOLL_RETURN_IF_ERROR(check_optimizer_capability(id, req.capabilities()));
  // A site that cannot fill one sequence cannot train: refused before it counts as joined.
  // (0 = not reported, as older nodes do; they check it themselves after joining.)
  const uint64_t window = uint64_t{config_.model.seq_len} + 1;
  if (req.data().train_tokens() > 0 && req.data().train_tokens() < window)
    return FailedPrecondition("site '" + id + "' has " + std::to_string(req.data().train_tokens()) +
                              " training tokens, fewer than one sequence of seq_len + 1 = " +
                              std::to_string(window) + ": add documents to its --data");

  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) return Unavailable("coordinator is shutting down; reconnect later");
  ATOLL_RETURN_IF_ERROR(strategy_->check_budget(id, budget));
  ATOLL_RETURN_IF_ERROR(check_site_tokenizer_locked(id, req.data()));
  const auto now = Clock::now();
  size_t active = 0;
  for (const auto& [nid, n] : nodes_) active += (n.status == NodeStatus::kActive && nid != id);
  // Seats kept for the nodes active before a coordinator restart that are not back yet.
  size_t kept = 0;
  for (auto it = seats_kept_.begin(); it != seats_kept_.end();) {
    if (it->second <= now) {
      it = seats_kept_.erase(it);
      continue;
    }
    auto n = nodes_.find(it->first);
    kept += it->first != id && (n == nodes_.end() || n->second.status != NodeStatus::kActive);
    ++it;
  }
  if (active + kept >= config_.diloco.max_nodes)
    return OutOfRange(
        "experiment '" + experiment_id_ +
        "' already has diloco.max_nodes = " + std::to_string(config_.diloco.max_nodes) + " nodes" +
        (kept == 0 ? std::string()
                   : " (" + std::to_string(kept) +
                         " of the seats are kept for its nodes of before the coordinator "
                         "restarted, until they are back or lost_after_heartbeats × "
                         "heartbeat_interval_s have passed)"));
  NodeState& n = nodes_[id];
  const bool rejoin = !n.record.node_id.empty();
  n.status = NodeStatus::kActive;
  n.last_seen = now;
  n.record.node_id = id;
  n.record.state = "active";
  n.record.device = req.capabilities().device();
  n.record.threads = req.capabilities().threads();
  n.record.budget = budget;
  n.record.joined_unix_ms = unix_ms_now();
  n.record.last_seen_unix_ms = n.record.joined_unix_ms;
  ATOLL_RETURN_IF_ERROR(store_.put_node(experiment_id_, n.record));
  const std::string version = printable_version(req.client_version());
  audit(rejoin ? "node_rejoined" : "node_joined",
        id + " device " + n.record.device + " version " + version);
  Event e{Event::Kind::kNodeJoined};
  e.round = experiment_.current_round;
  e.node_id = id;
  e.message = std::string(rejoin ? "rejoined" : "joined") + " (" + version + ")";
  // Builds that differ may not understand each other's newer fields (docs/protocol.md,
  // "Settings from a newer peer"): said at the join, where the operator looks first.
  if (version != build_label())
    e.message += "; this coordinator runs " + build_label() +
                 ": run one build at every site (docs/coordinator.md, \"Upgrading\")";
  emit(std::move(e));
  pb::JoinResponse resp;
  fill_join_response(id, resp);
  cv_.notify_all();
  return resp;
}

Status RoundEngine::check_site_tokenizer_locked(const std::string& id,
                                                const pb::DataProfile& data) {
  if (data.tokenizer_sha256().empty()) return Status::Ok();  // an older node: not reported
  if (data.tokenizer().size() > 64 || data.tokenizer_sha256().size() != 64)
    return InvalidArgument(
        "data.tokenizer must be a name of at most 64 characters and "
        "data.tokenizer_sha256 64 hex digits");
  if (!site_tokenizer_) {
    site_tokenizer_ = SiteTokenizer{data.tokenizer(), data.tokenizer_sha256(),
                                    "site '" + id + "', the first to join"};
    // Stored with the next committed round (or state change): a restart keeps checking it.
    experiment_.site_tokenizer = site_tokenizer_;
    return Status::Ok();
  }
  if (site_tokenizer_->sha256 == data.tokenizer_sha256()) return Status::Ok();
  return FailedPrecondition(
      "site '" + id + "' reads its data with tokenizer " + data.tokenizer() + " (sha256 " +
      data.tokenizer_sha256().substr(0, 16) + "...), this experiment's sites with " +
      site_tokenizer_->name + " (sha256 " + site_tokenizer_->sha256.substr(0, 16) + "..., from " +
      site_tokenizer_->source +
      "): every site must tokenize alike; give each node the same --base CKPT (or none)");
}

void RoundEngine::fill_join_response(const std::string& id, pb::JoinResponse& resp) const {
  resp.set_node_id(id);
  resp.set_experiment_id(experiment_id_);
  pb::ModelSpec* m = resp.mutable_model();
  const ModelSection& mc = config_.model;
  m->set_vocab(mc.vocab);
  m->set_dim(mc.dim);
  m->set_layers(mc.layers);
  m->set_heads(mc.heads);
  m->set_ffn_hidden(mc.ffn_hidden);
  m->set_seq_len(mc.seq_len);
  m->set_rope_base(mc.rope_base);
  m->set_norm_eps(mc.norm_eps);
  m->set_moe_experts(mc.moe_experts);
  m->set_moe_top_k(mc.moe_top_k);
  m->set_moe_hidden(mc.moe_hidden);
  m->set_moe_every(mc.moe_every);
  m->set_moe_score(mc.moe_score);
  m->set_moe_shared_hidden(mc.moe_shared_hidden);
  m->set_moe_aux_coef(mc.moe_aux_coef);
  m->set_moe_z_coef(mc.moe_z_coef);
  m->set_kv_heads(mc.kv_heads);
  m->set_untied_head(!mc.tie_word_embeddings);
  m->set_attention_bias(mc.attention_bias);
  if (config_.is_lora()) {
    pb::LoraSpec* l = resp.mutable_lora();
    l->set_rank(config_.lora.rank);
    l->set_alpha(config_.lora.alpha);
    l->set_targets(config_.lora.targets);
    l->set_base_dtype(config_.lora.base_dtype);
    resp.set_base_fingerprint(config_.lora.base_fingerprint);
  }
  pb::TrainSpec* t = resp.mutable_train();
  const TrainSection& tc = config_.train;
  t->set_batch_size(tc.batch_size);
  t->set_lr(tc.lr);
  t->set_min_lr(tc.min_lr);
  t->set_warmup_steps(tc.warmup_steps);
  t->set_total_inner_steps(static_cast<uint64_t>(config_.diloco.rounds) *
                           config_.diloco.steps_per_round());
  t->set_weight_decay(tc.weight_decay);
  t->set_beta1(tc.beta1);
  t->set_beta2(tc.beta2);
  t->set_grad_clip(tc.grad_clip);
  t->set_seed(config_.seed);
  t->set_codec(tc.codec);
  t->set_error_feedback(tc.error_feedback);
  t->set_precision(tc.precision);
  if (inner_optimizer(config_) != algorithms::InnerOptimizer::kAdamW) {
    t->set_optimizer(tc.optimizer);
    t->set_muon_momentum(tc.muon_momentum);
  }
  strategy_->describe(*t);
  if (config_.secagg.enabled) {
    pb::SecAggSpec* sa = t->mutable_secagg();
    sa->set_enabled(true);
    sa->set_clip_range(config_.secagg.clip_range);
    sa->set_quantization_range(config_.secagg.quantization_range);
    sa->set_masking(config_.secagg.masking);
  }
  resp.set_heartbeat_interval_ms(
      static_cast<uint32_t>(std::lround(config_.diloco.heartbeat_interval_s * 1000.0)));
  // Position by id among the nodes seen since open (atoll.proto: informational, not stable).
  resp.set_node_index(static_cast<uint32_t>(std::distance(nodes_.begin(), nodes_.find(id))));
}

StatusOr<pb::HeartbeatResponse> RoundEngine::heartbeat(const std::string& id,
                                                       const pb::HeartbeatRequest& req) {
  std::lock_guard<std::mutex> lk(mu_);
  pb::HeartbeatResponse resp;
  if (Status st = member_locked(id, req.experiment_id()); !st.ok()) {
    if (st.code() != StatusCode::kNotFound || !check_experiment(req.experiment_id()).ok())
      return st;
    resp.set_known(false);  // not a member: the node should join again
    return resp;
  }
  NodeState& n = nodes_[id];
  n.progress = req;
  n.record.last_seen_unix_ms = unix_ms_now();
  resp.set_known(true);
  return resp;
}

StatusOr<pb::Task> RoundEngine::next_task(const std::string& id, const pb::NextTaskRequest& req,
                                          const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lk(mu_);
  ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
  const auto now = Clock::now();
  const auto deadline =
      now + std::chrono::milliseconds(std::min(req.wait_ms(), options_.max_wait_ms));
  NodeState& n = nodes_[id];
  ++n.polling;
  // A site that departed a securely aggregated round is free for the next one.
  const bool assigned_open = is_participant_locked(id) && !round_.updates.count(id) &&
                             !(round_.secagg && round_.secagg->departed(id));
  if (!assigned_open) n.ready = true;
  maybe_start_round_locked(now);

  Status result;
  pb::Task task;
  task.set_kind(pb::Task::WAIT);
  for (;;) {
    if (stopping_) {
      result = Unavailable("coordinator is shutting down; reconnect later");
      break;
    }
    const ExperimentState s = experiment_.state;
    if (s == ExperimentState::kFinished || s == ExperimentState::kFailed) {
      task.set_kind(pb::Task::STOP);
      task.set_round(experiment_.current_round);
      task.set_reason(s == ExperimentState::kFinished
                          ? "experiment finished after " +
                                std::to_string(experiment_.current_round) + " rounds"
                          : "experiment failed: " + experiment_.failure);
      break;
    }
    if (n.status == NodeStatus::kRevoked) {  // while this call waited
      result = PermissionDenied(n.revoked_why);
      break;
    }
    if (n.status != NodeStatus::kActive) {
      task.set_kind(pb::Task::STOP);
      task.set_reason("node is no longer a member; Join again");
      break;
    }
    if (round_.scoring && is_participant_locked(id) && !round_.scores.count(id)) {
      // Measure importance on θ_r first (re-sent if the node polls again without it).
      task.set_kind(pb::Task::SCORE);
      task.set_round(round_.round);
      task.set_params_fingerprint(experiment_.params_fingerprint);
      task.set_deadline_unix_ms(round_.deadline_unix_ms);
      strategy_->fill_score_task(task);
      n.ready = false;
      break;
    }
    // A node that restarted after its round's secure-aggregation roster was fixed waits for
    // the next round (SecAggRound::departed).
    if (!round_.scoring && is_participant_locked(id) && !round_.updates.count(id) &&
        !round_.receiving.count(id) && !(round_.secagg && round_.secagg->departed(id))) {
      task.set_kind(pb::Task::TRAIN);
      task.set_round(round_.round);
      task.set_inner_steps(config_.diloco.steps_per_round());
      task.set_params_fingerprint(experiment_.params_fingerprint);
      task.set_deadline_unix_ms(round_.deadline_unix_ms);
      task.set_global_step(round_.round * config_.diloco.steps_per_round());
      strategy_->fill_train_task(id, round_.round, task);
      n.ready = false;
      break;
    }
    if ((cancelled && cancelled()) || cv_.wait_until(lk, deadline) == std::cv_status::timeout) {
      task.set_kind(pb::Task::WAIT);
      task.set_round(experiment_.current_round);
      task.set_reason(
          s == ExperimentState::kPaused    ? "experiment paused"
          : s == ExperimentState::kCreated ? "experiment not started yet"
          : committing_ ? "round " + std::to_string(round_.round) + " is being committed"
          : round_.open ? "round " + std::to_string(round_.round) + " in progress"
                        : "waiting for diloco.min_nodes = " +
                              std::to_string(config_.diloco.min_nodes) + " ready nodes");
      break;
    }
  }
  --n.polling;
  n.last_seen = Clock::now();
  if (!result.ok()) return result;
  return task;
}

StatusOr<PullPlan> RoundEngine::pull(const std::string& id, const pb::PullParamsRequest& req,
                                     PullDigest digest) {
  std::shared_ptr<const std::vector<float>> theta;
  pb::TensorHeader header;
  std::optional<uint64_t> base_round;  // a θ version the node holds and the store still has
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
    if (req.round() != experiment_.current_round)
      return FailedPrecondition("stale round: θ of round " + std::to_string(req.round()) +
                                " requested, the current round is " +
                                std::to_string(experiment_.current_round));
    ++nodes_[id].pulling;
    theta = theta_;  // immutable snapshot: encoded and streamed without the lock
    header.set_experiment_id(experiment_id_);
    header.set_round(experiment_.current_round);
    header.set_numel(theta->size());
    header.set_layout_fingerprint(experiment_.layout_fingerprint);
    header.set_params_fingerprint(experiment_.params_fingerprint);
    const std::string& have = req.have_fingerprint();
    if (pulls_.sends_deltas() && !have.empty() && have != experiment_.params_fingerprint) {
      auto v = versions_.find(have);
      if (v != versions_.end() && v->second < experiment_.current_round) base_round = v->second;
    }
  }
  // Released with the plan, after the stream (or its failure): the node was alive until then.
  struct PullInFlight {
    PullInFlight(RoundEngine* e, std::string node) : engine(e), id(std::move(node)) {}
    PullInFlight(const PullInFlight&) = delete;  // one release per pull
    PullInFlight& operator=(const PullInFlight&) = delete;
    RoundEngine* engine;
    std::string id;
    ~PullInFlight() {
      std::lock_guard<std::mutex> lk(engine->mu_);
      auto n = engine->nodes_.find(id);
      if (n == engine->nodes_.end()) return;
      --n->second.pulling;
      n->second.last_seen = Clock::now();
    }
  };
  auto in_flight = std::make_shared<const PullInFlight>(this, id);
  auto plan = pulls_.plan(std::move(header), std::move(theta), base_round, req.have_fingerprint(),
                          digest);
  if (plan.ok()) plan->in_flight = std::move(in_flight);
  return plan;
}

void RoundEngine::pull_delivered(const std::string& id, uint64_t round, uint64_t payload_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (round_.open && round_.round == round && is_participant_locked(id))
    round_.bytes_down[id] += payload_bytes;
  else
    late_bytes_down_[id] += payload_bytes;  // the next record to close counts it
}

Status RoundEngine::admit_metrics_locked(const std::string& id, uint64_t round) {
  const uint64_t current = experiment_.current_round;
  const uint64_t oldest = current > kMetricsRoundWindow ? current - kMetricsRoundWindow : 0;
  if (round < oldest || round > current)
    return InvalidArgument("metrics for round " + std::to_string(round) +
                           " refused: the current round is " + std::to_string(current) +
                           " and reports are taken for rounds " + std::to_string(oldest) + " to " +
                           std::to_string(current));
  std::map<uint64_t, uint32_t>& counts = metrics_reports_[id];
  counts.erase(counts.begin(), counts.lower_bound(oldest));  // rounds that left the window
  uint32_t& n = counts[round];
  if (n >= kMaxReportsPerRound)
    return OutOfRange("metrics for round " + std::to_string(round) + " refused: node '" + id +
                      "' already reported " + std::to_string(n) + " times for it (at most " +
                      std::to_string(kMaxReportsPerRound) + ")");
  ++n;
  return Status::Ok();
}

Status RoundEngine::report_metrics(const std::string& id, const pb::MetricsReport& req) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
  }
  if (static_cast<size_t>(req.metrics_size()) > kMaxMetrics)
    return InvalidArgument("at most " + std::to_string(kMaxMetrics) + " metrics per report (got " +
                           std::to_string(req.metrics_size()) + ")");
  boost::json::object o;
  o["node"] = id;
  o["round"] = req.round();
  o["step"] = req.step();
  o["unix_ms"] = unix_ms_now();
  boost::json::object values;
  std::vector<std::pair<std::string, double>> list;
  for (const auto& m : req.metrics()) {
    if (!valid_metric_name(m.name()))
      return InvalidArgument("metric name '" + m.name().substr(0, kMaxMetricName) + "' must be 1-" +
                             std::to_string(kMaxMetricName) + " characters of [A-Za-z0-9._/-]");
    if (!std::isfinite(m.value()))
      return InvalidArgument("metric '" + m.name() + "' is not finite");
    values[m.name()] = m.value();
    list.emplace_back(m.name(), m.value());
  }
  o["metrics"] = std::move(values);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(admit_metrics_locked(id, req.round()));
  }
  ATOLL_RETURN_IF_ERROR(
      store_.put_metrics(experiment_id_, id, req.round(), boost::json::serialize(o)));
  std::lock_guard<std::mutex> lk(mu_);  // events leave in the order of the state they report
  Event e{Event::Kind::kMetrics};
  e.round = req.round();
  e.node_id = id;
  e.metrics = std::move(list);
  emit(std::move(e));
  return Status::Ok();
}

Status RoundEngine::report_importance(const std::string& id, const pb::ImportanceReport& req) {
  std::optional<Commit> commit_job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
    Status st = strategy_->check_importance_wanted(experiment_id_);
    if (st.ok() && (!round_.scoring || req.round() != round_.round || !is_participant_locked(id)))
      st = FailedPrecondition("stale round: importance for round " + std::to_string(req.round()) +
                              ", but no scoring phase of that round includes '" + id + "'");
    if (st.ok() && round_.scores.count(id))
      st = AlreadyExists("importance of '" + id + "' for round " + std::to_string(req.round()) +
                         " was already received");
    if (st.ok()) {
      auto scores = strategy_->parse_scores(req);
      if (scores.ok())
        round_.scores[id] = std::move(*scores);
      else
        st = scores.status();
    }
    if (!st.ok()) {
      audit("importance_rejected", id + ": " + st.to_string());
      return st;
    }
    audit("importance", id + " round " + std::to_string(round_.round));
    commit_job = maybe_close_round_locked(Clock::now());
    cv_.notify_all();
  }
  if (commit_job) commit(std::move(*commit_job));
  return Status::Ok();
}

void RoundEngine::end_membership_locked(const std::string& id, NodeStatus status,
                                        const std::string& why) {
  NodeState& n = nodes_[id];
  n.status = status;
  n.ready = false;
  const bool lost = status == NodeStatus::kLost, revoked = status == NodeStatus::kRevoked;
  n.record.state = lost ? "lost" : revoked ? "revoked" : "left";
  (void)store_.put_node(experiment_id_, n.record);
  audit(lost ? "node_lost" : revoked ? "node_revoked" : "node_left", lost ? id : id + ": " + why);
  Event e{lost      ? Event::Kind::kNodeLost
          : revoked ? Event::Kind::kNodeRevoked
                    : Event::Kind::kNodeLeft};
  e.round = experiment_.current_round;
  e.node_id = id;
  e.message = why;
  emit(std::move(e));
}

void RoundEngine::revoke_node(const std::string& id, const std::string& why,
                              const std::string& refusal) {
  std::optional<Commit> commit_job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = nodes_.find(id);
    if (it == nodes_.end() || it->second.status != NodeStatus::kActive) return;
    it->second.revoked_why = !refusal.empty()
                                 ? refusal
                                 : "the certificate of node '" + id + "' was revoked (" + why +
                                       "): it no longer takes part";
    end_membership_locked(id, NodeStatus::kRevoked, why);
    const bool contributed = is_participant_locked(id) &&
                             (round_.updates.count(id) > 0 || round_.receiving.count(id) > 0 ||
                              round_.scores.count(id) > 0 || round_.secagg != nullptr);
    if (contributed)
      restart_round_locked("the certificate of node '" + id +
                           "' was revoked: what it sent for round " + std::to_string(round_.round) +
                           " is discarded, and the round starts again without it");
    else
      commit_job = maybe_close_round_locked(Clock::now());
    cv_.notify_all();
  }
  if (commit_job) commit(std::move(*commit_job));
}

Status RoundEngine::leave(const std::string& id, const pb::LeaveRequest& req) {
  std::optional<Commit> commit_job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ATOLL_RETURN_IF_ERROR(member_locked(id, req.experiment_id()));
    end_membership_locked(id, NodeStatus::kLeft, req.reason().substr(0, 200));
    commit_job = maybe_close_round_locked(Clock::now());
    cv_.notify_all();
  }
  if (commit_job) commit(std::move(*commit_job));
  return Status::Ok();
}

}  // namespace atl::coordinator
