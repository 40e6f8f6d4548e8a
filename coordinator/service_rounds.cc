// CoordinatorService: construction, lifecycle, the round state machine, the ticker and event
// delivery. The gRPC handlers are in service.cc.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "coordinator/service.h"
#include "kernels/core/sha256.h"

namespace atl::coordinator {
namespace {

uint64_t unix_ms_now() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

const char* event_kind_name(Event::Kind k) {
  switch (k) {
    case Event::Kind::kStateChanged:
      return "state";
    case Event::Kind::kNodeJoined:
      return "node_joined";
    case Event::Kind::kNodeLost:
      return "node_lost";
    case Event::Kind::kNodeLeft:
      return "node_left";
    case Event::Kind::kRoundStarted:
      return "round_started";
    case Event::Kind::kUpdateAccepted:
      return "update_accepted";
    case Event::Kind::kUpdateRejected:
      return "update_rejected";
    case Event::Kind::kRoundCommitted:
      return "round_committed";
    case Event::Kind::kRoundRestarted:
      return "round_restarted";
    case Event::Kind::kMetrics:
      return "metrics";
    case Event::Kind::kFinished:
      return "finished";
    case Event::Kind::kFailed:
      return "failed";
  }
  return "unknown";
}

CoordinatorService::CoordinatorService(Store& store, ExperimentConfig config,
                                       ServiceOptions options)
    : store_(store),
      config_(std::move(config)),
      options_(std::move(options)),
      experiment_id_(config_.name),
      outer_(algorithms::OuterNesterovOptions{static_cast<float>(config_.diloco.outer_lr),
                                              static_cast<float>(config_.diloco.outer_momentum)}),
      heartbeat_interval_(seconds(config_.diloco.heartbeat_interval_s)),
      lost_timeout_(
          seconds(config_.diloco.heartbeat_interval_s * config_.diloco.lost_after_heartbeats)) {}

StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::open(
    Store& store, const ExperimentConfig& config, const algorithms::ParamSet& initial,
    ServiceOptions options) {
  ATOLL_RETURN_IF_ERROR(validate_experiment_config(config, "experiment config"));
  std::unique_ptr<CoordinatorService> svc(
      new CoordinatorService(store, config, std::move(options)));
  const std::string layout_fp = algorithms::layout_fingerprint(initial.layout());
  auto existing = store.load_experiment(config.name);
  if (existing.ok()) {
    ATOLL_ASSIGN_OR_RETURN(CommittedState st, store.load_state(config.name));
    if (st.experiment.layout_fingerprint != layout_fp || st.experiment.numel != initial.numel())
      return FailedPrecondition(
          "experiment '" + config.name + "' in the store has a different model (" +
          std::to_string(st.experiment.numel) + " parameters, layout " +
          st.experiment.layout_fingerprint.substr(0, 12) + ") than the config (" +
          std::to_string(initial.numel()) + " parameters, layout " + layout_fp.substr(0, 12) +
          "); use another experiment name or store");
    svc->experiment_ = std::move(st.experiment);
    svc->theta_ = std::make_shared<const std::vector<float>>(std::move(st.params));
    svc->has_momentum_ = st.momentum.has_value();
    svc->momentum_ = st.momentum ? std::move(*st.momentum) : std::vector<float>(initial.numel());
  } else if (existing.status().code() == StatusCode::kNotFound) {
    ExperimentRecord e;
    e.id = config.name;
    e.state = ExperimentState::kCreated;
    e.current_round = 0;
    e.params_fingerprint = initial.fingerprint();
    e.layout_fingerprint = layout_fp;
    e.numel = initial.numel();
    e.config_toml = to_toml(config);
    e.created_unix_ms = unix_ms_now();
    ATOLL_RETURN_IF_ERROR(store.create_experiment(e, initial.vec()));
    svc->experiment_ = e;
    svc->theta_ = std::make_shared<const std::vector<float>>(initial.vec());
    svc->momentum_.assign(initial.numel(), 0.0f);
  } else {
    return existing.status();
  }
  if (config.diloco.streaming()) {
    auto frags = algorithms::fragment_ranges(initial.layout(), config.diloco.streaming_fragments);
    if (!frags.ok())
      return InvalidArgument("diloco.streaming_fragments = " +
                             std::to_string(config.diloco.streaming_fragments) + ": " +
                             frags.status().message());
    svc->fragments_ = std::move(*frags);
  }
  // θ versions still in the store can be delta bases for pulls: θ_v's fingerprint is the base
  // fingerprint of round record v (the current one is the experiment's).
  if (auto rounds = store.list_param_rounds(config.name); rounds.ok()) {
    for (uint64_t v : *rounds) {
      if (v >= svc->experiment_.current_round) continue;
      if (auto rec = store.load_round(config.name, v); rec.ok())
        svc->remember_version_locked(v, rec->base_fingerprint);
    }
  }
  svc->remember_version_locked(svc->experiment_.current_round,
                               svc->experiment_.params_fingerprint);
  // Previously known nodes are remembered (for audit) but must Join again to take part.
  svc->round_.round = svc->experiment_.current_round;
  svc->audit("open", "round " + std::to_string(svc->experiment_.current_round) + " state " +
                         experiment_state_name(svc->experiment_.state));
  svc->event_thread_ = std::thread([s = svc.get()] { s->event_loop(); });
  svc->ticker_ = std::thread([s = svc.get()] { s->ticker_loop(); });
  return svc;
}

CoordinatorService::~CoordinatorService() {
  shutdown();
  if (ticker_.joinable()) ticker_.join();
  {
    std::lock_guard<std::mutex> lk(event_mu_);
    events_stop_ = true;
  }
  event_cv_.notify_all();
  if (event_thread_.joinable()) event_thread_.join();
}

void CoordinatorService::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

Status CoordinatorService::start() {
  std::lock_guard<std::mutex> lk(mu_);
  const ExperimentState s = experiment_.state;
  if (s == ExperimentState::kRunning) return Status::Ok();
  if (s == ExperimentState::kFinished || s == ExperimentState::kFailed)
    return FailedPrecondition("experiment '" + experiment_id_ + "' is " + experiment_state_name(s) +
                              " and cannot be started again");
  set_state_locked(ExperimentState::kRunning, "started");
  maybe_start_round_locked(Clock::now());
  return Status::Ok();
}

Status CoordinatorService::pause() {
  std::lock_guard<std::mutex> lk(mu_);
  if (experiment_.state != ExperimentState::kRunning)
    return FailedPrecondition("experiment '" + experiment_id_ + "' is " +
                              experiment_state_name(experiment_.state) + ", not running");
  set_state_locked(ExperimentState::kPaused, "paused");
  return Status::Ok();
}

Status CoordinatorService::stop(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  const ExperimentState s = experiment_.state;
  if (s == ExperimentState::kFinished || s == ExperimentState::kFailed)
    return FailedPrecondition("experiment '" + experiment_id_ + "' is already " +
                              experiment_state_name(s));
  if (round_.open) {
    audit("round", "round " + std::to_string(round_.round) + " abandoned: " + why);
    round_ = Round{};
    round_.round = experiment_.current_round;
  }
  quorum_since_.reset();
  set_state_locked(ExperimentState::kFinished, "stopped: " + why);
  Event f{Event::Kind::kFinished};
  f.round = experiment_.current_round;
  f.message = "stopped after " + std::to_string(experiment_.current_round) + " rounds: " + why;
  emit_locked(std::move(f));
  return Status::Ok();
}

ExperimentState CoordinatorService::state() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.state;
}
uint64_t CoordinatorService::current_round() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.current_round;
}
std::string CoordinatorService::params_fingerprint() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.params_fingerprint;
}
std::vector<float> CoordinatorService::params() const {
  std::lock_guard<std::mutex> lk(mu_);
  return *theta_;
}

std::vector<NodeSnapshot> CoordinatorService::nodes() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<NodeSnapshot> out;
  for (const auto& [id, n] : nodes_) {
    NodeSnapshot s;
    s.node_id = id;
    s.status = n.status == NodeStatus::kActive ? "active"
               : n.status == NodeStatus::kLost ? "lost"
                                               : "left";
    s.ready = n.ready;
    s.round = n.progress.round();
    s.inner_step = n.progress.inner_step();
    s.loss = n.progress.loss();
    s.tokens_per_s = n.progress.tokens_per_s();
    s.last_seen_unix_ms = n.record.last_seen_unix_ms;
    s.device = n.record.device;
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<ExperimentState> CoordinatorService::wait_until_finished(
    Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lk(mu_);
  auto final_state = [&] {
    return experiment_.state == ExperimentState::kFinished ||
           experiment_.state == ExperimentState::kFailed;
  };
  if (!cv_.wait_until(lk, deadline, final_state))
    return Status(StatusCode::kDeadlineExceeded, "experiment '" + experiment_id_ + "' still " +
                                                     experiment_state_name(experiment_.state) +
                                                     " at round " +
                                                     std::to_string(experiment_.current_round));
  return experiment_.state;
}

bool CoordinatorService::wait_for_round(uint64_t round, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_until(lk, deadline, [&] {
    return experiment_.current_round >= round || experiment_.state == ExperimentState::kFailed ||
           experiment_.state == ExperimentState::kFinished;
  });
}

void CoordinatorService::set_state_locked(ExperimentState s, const std::string& why) {
  if (experiment_.state == s) return;
  experiment_.state = s;
  if (s == ExperimentState::kFailed) experiment_.failure = why;
  Status st = store_.put_experiment(experiment_);
  if (!st.ok() && s != ExperimentState::kFailed) {
    // Lifecycle changes must persist too; a store that cannot write is a failed experiment.
    experiment_.state = ExperimentState::kFailed;
    experiment_.failure = st.to_string();
  }
  audit("state", experiment_state_name(experiment_.state) + std::string(": ") + why);
  Event e{Event::Kind::kStateChanged};
  e.round = experiment_.current_round;
  e.message = experiment_state_name(experiment_.state);
  emit_locked(std::move(e));
  if (experiment_.state == ExperimentState::kFailed) {
    Event f{Event::Kind::kFailed};
    f.round = experiment_.current_round;
    f.message = experiment_.failure;
    emit_locked(std::move(f));
  }
  cv_.notify_all();
}

bool CoordinatorService::is_participant_locked(const std::string& node) const {
  return round_.open &&
         std::binary_search(round_.participants.begin(), round_.participants.end(), node);
}

void CoordinatorService::maybe_start_round_locked(Clock::time_point now) {
  if (stopping_ || round_.open || experiment_.state != ExperimentState::kRunning) return;
  if (experiment_.current_round >= config_.diloco.rounds) return;
  std::vector<std::string> ready;
  size_t live = 0;
  for (const auto& [id, n] : nodes_) {
    if (n.status != NodeStatus::kActive) continue;
    ++live;
    if (n.ready) ready.push_back(id);  // map order: sorted
  }
  if (ready.size() < config_.diloco.min_nodes) {
    quorum_since_.reset();
    return;
  }
  if (ready.size() < live) {
    // Quorum, but some live nodes are still busy (e.g. pulling, restarting): give them
    // start_wait_s to become ready so that rounds do not leave nodes out by a few ms.
    if (!quorum_since_) quorum_since_ = now;
    if (now - *quorum_since_ < seconds(config_.diloco.start_wait_s)) return;
  }
  quorum_since_.reset();
  if (ready.size() > config_.diloco.max_nodes) ready.resize(config_.diloco.max_nodes);
  round_ = Round{};
  round_.open = true;
  round_.round = experiment_.current_round;
  round_.participants = ready;
  round_.started = now;
  round_.deadline = now + seconds(config_.diloco.round_deadline_s);
  round_.deadline_unix_ms =
      unix_ms_now() + static_cast<uint64_t>(config_.diloco.round_deadline_s * 1000.0);
  for (const auto& id : ready) nodes_[id].ready = false;
  round_.scoring = hydra_needs_scores_locked();
  std::string list;
  for (const auto& id : ready) list += (list.empty() ? "" : ",") + id;
  audit("round_started", "round " + std::to_string(round_.round) + " participants " + list);
  Event e{Event::Kind::kRoundStarted};
  e.round = round_.round;
  e.participants = ready;
  emit_locked(std::move(e));
  cv_.notify_all();
}

void CoordinatorService::maybe_close_round_locked(Clock::time_point now) {
  if (!round_.open) return;
  if (round_.scoring) {
    // Hydra scoring phase: select once every live participant reported, or at the deadline.
    size_t waiting = 0;
    for (const auto& id : round_.participants) {
      auto it = nodes_.find(id);
      if (!round_.scores.count(id) && it != nodes_.end() &&
          it->second.status == NodeStatus::kActive)
        ++waiting;
    }
    if (waiting == 0 || now >= round_.deadline) hydra_finish_scoring_locked();
    return;
  }
  size_t outstanding = 0;  // live participants that have not pushed yet
  for (const auto& id : round_.participants) {
    if (round_.updates.count(id)) continue;
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second.status == NodeStatus::kActive) ++outstanding;
  }
  const size_t pushed = round_.updates.size();
  const size_t quorum = config_.diloco.min_nodes;
  if (outstanding == 0 && pushed >= quorum) return close_round_locked(now);
  if (now >= round_.deadline) {
    if (pushed >= quorum) return close_round_locked(now);
    return restart_round_locked(
        "only " + std::to_string(pushed) + " of diloco.min_nodes = " + std::to_string(quorum) +
        " updates arrived before the " + std::to_string(config_.diloco.round_deadline_s) +
        " s deadline; raise diloco.round_deadline_s or lower diloco.min_nodes");
  }
  if (outstanding == 0 && round_.receiving.empty())
    return restart_round_locked(
        "every live participant is done but only " + std::to_string(pushed) +
        " of diloco.min_nodes = " + std::to_string(quorum) + " updates arrived");
}

void CoordinatorService::restart_round_locked(const std::string& why) {
  const uint64_t r = round_.round;
  round_ = Round{};
  round_.round = r;
  audit("round_restarted", "round " + std::to_string(r) + ": " + why);
  Event e{Event::Kind::kRoundRestarted};
  e.round = r;
  e.message = why;
  emit_locked(std::move(e));
  cv_.notify_all();
  maybe_start_round_locked(Clock::now());
}

algorithms::FragmentRange CoordinatorService::fragment_of_locked(uint64_t round) const {
  if (fragments_.empty()) return {0, theta_->size()};
  return fragments_[algorithms::fragment_of_round(round, config_.diloco.streaming_fragments)];
}

void CoordinatorService::remember_version_locked(uint64_t round, const std::string& fp) {
  versions_[fp] = round;
  // The store keeps θ of rounds [current + 1 − keep_params, current].
  const uint64_t keep = config_.diloco.keep_params;
  for (auto it = versions_.begin(); it != versions_.end();) {
    if (it->second + keep <= round)
      it = versions_.erase(it);
    else
      ++it;
  }
}

void CoordinatorService::close_round_locked(Clock::time_point now) {
  const uint64_t r = round_.round;
  // Plain DiLoCo: the whole θ. Streaming: the round's fragment, a slice of θ and momentum
  // (both per element), so the other fragments are untouched bit for bit.
  const algorithms::FragmentRange frag = fragment_of_locked(r);
  // Updates in sorted node order (std::map): the aggregate is bitwise reproducible.
  std::vector<algorithms::Update> ups;
  for (const auto& [id, u] : round_.updates) ups.push_back({id, u.tokens, u.delta});
  std::vector<float> delta(frag.numel), theta_next(*theta_), momentum_next = momentum_;
  // A fragment's momentum buffer starts at its first sync (round < P), as PyTorch's does.
  const bool first_step =
      fragments_.empty() ? !has_momentum_ : r < config_.diloco.streaming_fragments;
  Status st;
  if (config_.is_hydra()) {
    st = hydra_aggregate_locked(theta_next, momentum_next, first_step);
  } else {
    st = algorithms::aggregate_pseudo_gradients(ups, delta);
    if (st.ok())
      st = outer_.step(std::span<float>(theta_next).subspan(frag.offset, frag.numel),
                       std::span<float>(momentum_next).subspan(frag.offset, frag.numel), delta,
                       first_step);
  }
  if (st.ok() && !algorithms::all_finite(theta_next))
    st = Internal("outer step produced non-finite parameters");

  RoundRecord rec;
  rec.round = r;
  rec.base_fingerprint = experiment_.params_fingerprint;
  double loss_weighted = 0;
  for (const auto& id : round_.participants) {
    ParticipantRecord p;
    p.node_id = id;
    auto bd = round_.bytes_down.find(id);
    p.bytes_down = bd == round_.bytes_down.end() ? 0 : bd->second;
    auto u = round_.updates.find(id);
    if (u != round_.updates.end()) {
      p.pushed = true;
      p.tokens = u->second.tokens;
      p.loss = u->second.loss;
      p.bytes_up = u->second.bytes;
      rec.tokens += p.tokens;
      loss_weighted += p.loss * static_cast<double>(p.tokens);
    }
    rec.bytes_up += p.bytes_up;
    rec.bytes_down += p.bytes_down;
    rec.participants.push_back(std::move(p));
  }
  rec.mean_loss = rec.tokens ? loss_weighted / static_cast<double>(rec.tokens) : 0.0;
  rec.duration_s = std::chrono::duration<double>(now - round_.started).count();
  rec.params_fingerprint = algorithms::params_fingerprint(theta_next);
  rec.momentum_fingerprint = algorithms::params_fingerprint(momentum_next);
  rec.committed_unix_ms = unix_ms_now();

  ExperimentRecord next = experiment_;
  next.current_round = r + 1;
  next.params_fingerprint = rec.params_fingerprint;
  if (next.current_round >= config_.diloco.rounds) next.state = ExperimentState::kFinished;
  if (st.ok()) st = store_.commit_round(next, rec, theta_next, momentum_next);
  if (!st.ok()) {
    // Nothing was committed: θ_r stays the current state, in memory and in the store.
    round_ = Round{};
    round_.round = r;
    set_state_locked(ExperimentState::kFailed,
                     "round " + std::to_string(r) + " could not be committed: " + st.to_string());
    return;
  }
  experiment_ = next;
  remember_version_locked(r + 1, rec.params_fingerprint);
  theta_ = std::make_shared<const std::vector<float>>(std::move(theta_next));
  momentum_ = std::move(momentum_next);
  has_momentum_ = true;
  round_ = Round{};
  round_.round = r + 1;
  Event e{Event::Kind::kRoundCommitted};
  e.round = r;
  e.record = rec;
  emit_locked(std::move(e));
  if (experiment_.state == ExperimentState::kFinished) {
    audit("state", "finished");
    Event f{Event::Kind::kFinished};
    f.round = experiment_.current_round;
    f.message = "finished after " + std::to_string(experiment_.current_round) + " rounds";
    emit_locked(std::move(f));
  }
  cv_.notify_all();
  maybe_start_round_locked(now);
}

void CoordinatorService::check_lost_locked(Clock::time_point now) {
  for (auto& [id, n] : nodes_) {
    if (n.status != NodeStatus::kActive || n.polling > 0) continue;
    if (now - n.last_seen <= lost_timeout_) continue;
    n.status = NodeStatus::kLost;
    n.ready = false;
    n.record.state = "lost";
    (void)store_.put_node(experiment_id_, n.record);
    audit("node_lost", id);
    Event e{Event::Kind::kNodeLost};
    e.round = experiment_.current_round;
    e.node_id = id;
    e.message =
        "no heartbeat for " + std::to_string(config_.diloco.lost_after_heartbeats) + " intervals";
    emit_locked(std::move(e));
  }
}

void CoordinatorService::ticker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    check_lost_locked(now);
    maybe_close_round_locked(now);
    maybe_start_round_locked(now);
    // Next wake-up: a fraction of the heartbeat interval (lost detection), the round deadline
    // and the end of a start wait, whichever comes first. Any state change also wakes us.
    Clock::time_point wake =
        now + std::max<Clock::duration>(heartbeat_interval_ / 4, std::chrono::milliseconds(10));
    if (round_.open) wake = std::min(wake, round_.deadline);
    if (quorum_since_) wake = std::min(wake, *quorum_since_ + seconds(config_.diloco.start_wait_s));
    cv_.wait_until(lk, wake);
  }
}

void CoordinatorService::emit_locked(Event e) {
  if (!options_.on_event) return;
  {
    std::lock_guard<std::mutex> lk(event_mu_);
    events_.push_back(std::move(e));
  }
  event_cv_.notify_one();
}

void CoordinatorService::event_loop() {
  std::unique_lock<std::mutex> lk(event_mu_);
  for (;;) {
    event_cv_.wait(lk, [&] { return events_stop_ || !events_.empty(); });
    if (events_.empty()) return;  // stop requested and drained
    Event e = std::move(events_.front());
    events_.pop_front();
    lk.unlock();
    options_.on_event(e);
    lk.lock();
  }
}

void CoordinatorService::audit(const std::string& event, const std::string& detail) {
  // The audit log is best effort: it never blocks progress.
  (void)store_.append_audit(experiment_id_, event, detail);
}

}  // namespace atl::coordinator
