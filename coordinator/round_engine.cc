// RoundEngine: construction, lifecycle, queries, the round state machine (start, close, commit,
// restart), the ticker and event delivery. Node calls are in round_engine_calls.cc and
// round_engine_updates.cc.
#include "coordinator/round_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/privacy.h"
#include "coordinator/update_screening.h"
#include "kernels/core/number_text.h"

namespace atl::coordinator {

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
    case Event::Kind::kNodeRevoked:
      return "node_revoked";
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
    case Event::Kind::kStore:
      return "store";
    case Event::Kind::kSecAggDeadline:
      return "secagg_deadline";
  }
  return "unknown";
}

const std::vector<const char*>& update_rejection_reasons() {
  static const std::vector<const char*> reasons = {
      "wire_version", "duplicate",  "stale_round", "wrong_shape", "wrong_base",
      "codec",        "bad_header", "too_large",   "not_finite",  "transfer"};
  return reasons;
}

namespace {

// privacy.noise_key's line in a config's TOML (to_toml); a build before the key wrote none.
constexpr std::string_view kNoiseKeyLine = "\nnoise_key = ";

// Whether the stored config was written by a build that knew privacy.noise_key.
bool written_with_noise_key(const ExperimentRecord& stored) {
  return stored.config_toml.find(kNoiseKeyLine) != std::string::npos;
}

// An experiment started again (after a crash, a stop, or the same command run twice) must be
// the experiment it was: a different seed, codec or schedule would continue its committed θ as
// another run, with nothing to say so. Stored configs that no longer parse (written by another
// version) are not compared.
Status check_same_config(const ExperimentRecord& stored, const ExperimentConfig& given) {
  // A stored config this version finds fault with (a bound added since it was written) is
  // still compared on every value it holds: tighter validation after an upgrade must not turn
  // the check off. Only a config that is not TOML at all is not compared.
  ConfigCheck created =
      check_experiment_config(stored.config_toml, "stored config of '" + stored.id + "'");
  if (!created.parsed) return Status::Ok();
  // Written before privacy.noise_key existed: its noise is keyed by the seed whatever the key
  // says now (open() keeps it so), and a config may say either.
  if (!written_with_noise_key(stored)) created.config.privacy.noise_key = given.privacy.noise_key;
  const std::vector<std::string> changes = config_changes(created.config, given);
  if (changes.empty()) return Status::Ok();
  constexpr size_t kShown = 4;
  std::string listed;
  for (size_t i = 0; i < std::min(changes.size(), kShown); ++i)
    listed += (i ? ", " : "") + changes[i];
  if (changes.size() > kShown)
    listed += " and " + std::to_string(changes.size() - kShown) + " more";
  return FailedPrecondition(
      "experiment '" + stored.id + "' in the store was created with another config (" + listed +
      "); start it with the config it was created with (GET /api/experiments/" + stored.id +
      " shows it), or use another experiment name or store");
}

}  // namespace

RoundEngine::RoundEngine(Store& store, ExperimentConfig config, EngineOptions options,
                         std::unique_ptr<RoundStrategy> strategy, PullPolicy policy)
    : store_(store),
      config_(std::move(config)),
      options_(std::move(options)),
      experiment_id_(config_.name),
      heartbeat_interval_(duration_of_seconds(config_.diloco.heartbeat_interval_s)),
      lost_timeout_(duration_of_seconds(config_.diloco.heartbeat_interval_s *
                                        config_.diloco.lost_after_heartbeats)),
      strategy_(std::move(strategy)),
      max_round_tokens_(
          mul_saturating(mul_saturating(config_.diloco.steps_per_round(), config_.train.batch_size),
                         config_.model.seq_len)),
      pulls_(store, config_.name, std::move(policy),
             [this](uint64_t round) { return strategy_->synced_range(round); }) {
  site_tokenizer_ = options_.tokenizer;
}

StatusOr<std::unique_ptr<RoundEngine>> RoundEngine::open(Store& store,
                                                         const ExperimentConfig& config,
                                                         const algorithms::ParamSet& initial,
                                                         EngineOptions options) {
  ATOLL_RETURN_IF_ERROR(validate_experiment_config(config, "experiment config"));
  ATOLL_ASSIGN_OR_RETURN(PullPolicy policy, parse_pull_policy(config.diloco.pull_codec));
  const std::string layout_fp = algorithms::layout_fingerprint(initial.layout());
  auto existing = store.load_experiment(config.name);
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) return existing.status();
  std::optional<CommittedState> resumed;
  if (existing.ok()) {
    ATOLL_ASSIGN_OR_RETURN(CommittedState st, store.load_state(config.name));
    // A changed key first: it names what changed the model (e.g. lora.base, model.dim).
    ATOLL_RETURN_IF_ERROR(check_same_config(st.experiment, config));
    if (st.experiment.layout_fingerprint != layout_fp || st.experiment.numel != initial.numel())
      return FailedPrecondition(
          "experiment '" + config.name + "' in the store has a different model (" +
          std::to_string(st.experiment.numel) + " parameters, layout " +
          st.experiment.layout_fingerprint.substr(0, 12) + ") than the config (" +
          std::to_string(initial.numel()) + " parameters, layout " + layout_fp.substr(0, 12) +
          "); use another experiment name or store");
    resumed = std::move(st);
  }
  // [privacy] noise_key = "secret": a key drawn once, at creation, and kept in the store only
  // (the seed is no secret: viewers read the config, checkpoints carry it). Experiments created
  // before it was kept, and noise_key = "seed", have none: the noise is keyed by the seed.
  uint64_t noise_key = resumed ? resumed->experiment.privacy_noise_key : 0;
  if (!resumed) {
    ATOLL_ASSIGN_OR_RETURN(noise_key, new_privacy_noise_key(config));
  }
  ATOLL_ASSIGN_OR_RETURN(
      std::unique_ptr<RoundStrategy> strategy,
      make_round_strategy(config, initial.layout(), noise_key != 0 ? noise_key : config.seed));
  // What the later rounds depend on, as committed with the current round (a store written
  // before it was kept has none: Hydra then selects again).
  if (resumed && resumed->strategy_state)
    ATOLL_RETURN_IF_ERROR(strategy->restore(*resumed->strategy_state));
  if (!resumed) {
    ExperimentRecord e;
    e.id = config.name;
    e.state = ExperimentState::kCreated;
    e.current_round = 0;
    e.params_fingerprint = initial.fingerprint();
    e.layout_fingerprint = layout_fp;
    e.numel = initial.numel();
    e.config_toml = to_toml(config);
    e.created_unix_ms = unix_ms_now();
    e.privacy_noise_key = noise_key;
    ATOLL_RETURN_IF_ERROR(store.create_experiment(e, initial.vec()));
    resumed = CommittedState{std::move(e), initial.vec(), std::nullopt,
                             std::nullopt, std::nullopt,  std::nullopt};
  }
  // The config as it runs: an experiment created before the noise had a key of its own keeps
  // the seed's noise, and says so (its log line and API view name the key actually used).
  ExperimentConfig running = config;
  if (running.privacy.clip_norm > 0 && noise_key == 0) running.privacy.noise_key = "seed";
  // A restart may change what may change (deadlines, lora.base, trim_fraction) and what the
  // experiment does not use: the record then holds the config this process runs, which the
  // API shows and checkpoints are built from (an old stored config may no longer validate).
  // A store from before privacy.noise_key stays without it, so that a later start can still
  // tell (check_same_config).
  std::string running_toml = to_toml(running);
  const bool keyless = existing.ok() && !written_with_noise_key(resumed->experiment);
  if (keyless) {
    const size_t at = running_toml.find(kNoiseKeyLine);
    if (at != std::string::npos) running_toml.erase(at, running_toml.find('\n', at + 1) - at);
  }
  if (existing.ok() && resumed->experiment.config_toml != running_toml) {
    const ConfigCheck before = check_experiment_config(resumed->experiment.config_toml);
    std::string what;
    for (const std::string& change : config_changes(before.config, running, /*every_key=*/true))
      if (!keyless || change.rfind("privacy.noise_key", 0) != 0)
        what += (what.empty() ? "" : ", ") + change;
    resumed->experiment.config_toml = running_toml;
    ATOLL_RETURN_IF_ERROR(store.put_experiment(resumed->experiment));
    (void)store.append_audit(config.name, "config",
                             "started with " + (what.empty() ? "the same values" : what) +
                                 "; the record holds this config now");
  }
  std::unique_ptr<RoundEngine> eng(
      new RoundEngine(store, running, std::move(options), std::move(strategy), std::move(policy)));
  eng->experiment_ = std::move(resumed->experiment);
  // The launch's tokenizer, else the one the store kept from before a restart.
  if (!eng->site_tokenizer_) eng->site_tokenizer_ = eng->experiment_.site_tokenizer;
  eng->experiment_.site_tokenizer = eng->site_tokenizer_;
  eng->theta_ = std::make_shared<const std::vector<float>>(std::move(resumed->params));
  eng->has_momentum_ = resumed->momentum.has_value();
  eng->momentum_ = std::make_shared<const std::vector<float>>(
      resumed->momentum ? std::move(*resumed->momentum) : std::vector<float>(initial.numel()));
  // The error feedback committed with the current round (zeros before the first commit).
  if (eng->pulls_.policy().broadcasts_updates())
    eng->feedback_ = std::make_shared<const std::vector<float>>(
        resumed->feedback ? std::move(*resumed->feedback) : std::vector<float>(initial.numel()));
  // The screening memory committed with the current round (empty before the first).
  ScreeningMemory screening;
  if (resumed->replay_memory) {
    ATOLL_ASSIGN_OR_RETURN(
        screening, decode_screening_memory(*resumed->replay_memory,
                                           "replay-detection memory of '" + config.name + "'"));
  }
  eng->screening_ = std::make_shared<const ScreeningMemory>(std::move(screening));
  // θ versions still in the store can be delta bases for pulls: θ_v's fingerprint is the base
  // fingerprint of round record v (the current one is the experiment's).
  if (auto rounds = store.list_param_rounds(config.name); rounds.ok()) {
    for (uint64_t v : *rounds) {
      if (v >= eng->experiment_.current_round) continue;
      if (auto rec = store.load_round(config.name, v); rec.ok())
        eng->remember_version_locked(v, rec->base_fingerprint);
    }
  }
  eng->remember_version_locked(eng->experiment_.current_round, eng->experiment_.params_fingerprint);
  // Previously known nodes must join again to take part; those active when the previous process
  // stopped keep their seats for the time they have to come back before they would count as
  // lost anyway.
  if (auto known = store.list_nodes(config.name); known.ok()) {
    const auto until = Clock::now() + eng->lost_timeout_;
    for (const NodeRecord& n : *known)
      if (n.state == "active") eng->seats_kept_[n.node_id] = until;
  }
  eng->round_.round = eng->experiment_.current_round;
  eng->audit("open", "round " + std::to_string(eng->experiment_.current_round) + " state " +
                         experiment_state_name(eng->experiment_.state));
  eng->event_thread_ = std::thread([e = eng.get()] { e->event_loop(); });
  eng->ticker_ = std::thread([e = eng.get()] { e->ticker_loop(); });
  return eng;
}

RoundEngine::~RoundEngine() {
  shutdown();
  if (ticker_.joinable()) ticker_.join();
  {
    // A commit running on a caller's thread still writes the store and publishes.
    std::unique_lock<std::mutex> lk(mu_);
    wait_commit_done(lk);
  }
  {
    std::lock_guard<std::mutex> lk(event_mu_);
    events_stop_ = true;
  }
  event_cv_.notify_all();
  if (event_thread_.joinable()) event_thread_.join();
}

void RoundEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void RoundEngine::wait_commit_done(std::unique_lock<std::mutex>& lk) const {
  cv_.wait(lk, [&] { return !committing_; });
}

Status RoundEngine::start() {
  std::unique_lock<std::mutex> lk(mu_);
  wait_commit_done(lk);
  const ExperimentState s = experiment_.state;
  if (s == ExperimentState::kRunning) return Status::Ok();
  if (s == ExperimentState::kFinished || s == ExperimentState::kFailed)
    return FailedPrecondition("experiment '" + experiment_id_ + "' is " + experiment_state_name(s) +
                              " and cannot be started again");
  set_state_locked(ExperimentState::kRunning, "started");
  if (paused_by_store_)
    return Unavailable("the store at " + store_.dir() +
                       " cannot be written; the experiment starts by itself when it can");
  maybe_start_round_locked(Clock::now());
  return Status::Ok();
}

Status RoundEngine::pause() {
  std::unique_lock<std::mutex> lk(mu_);
  wait_commit_done(lk);
  if (paused_by_store_) {
    // Paused already, for the store: now it stays paused when the store can be written again.
    paused_by_store_ = false;
    audit("state", "paused (it was paused because the store could not be written)");
    return Status::Ok();
  }
  if (experiment_.state != ExperimentState::kRunning)
    return FailedPrecondition("experiment '" + experiment_id_ + "' is " +
                              experiment_state_name(experiment_.state) + ", not running");
  set_state_locked(ExperimentState::kPaused, "paused");
  return Status::Ok();
}

Status RoundEngine::stop(const std::string& why) {
  std::unique_lock<std::mutex> lk(mu_);
  wait_commit_done(lk);
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
  emit(std::move(f));
  return Status::Ok();
}

ExperimentState RoundEngine::state() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.state;
}
uint64_t RoundEngine::current_round() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.current_round;
}
std::string RoundEngine::params_fingerprint() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_.params_fingerprint;
}
std::vector<float> RoundEngine::params() const {
  std::shared_ptr<const std::vector<float>> theta;
  {
    std::lock_guard<std::mutex> lk(mu_);
    theta = theta_;  // immutable snapshot: copied without the lock
  }
  return *theta;
}

std::vector<NodeSnapshot> RoundEngine::nodes() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<NodeSnapshot> out;
  for (const auto& [id, n] : nodes_) {
    NodeSnapshot s;
    s.node_id = id;
    s.status = n.status == NodeStatus::kActive    ? "active"
               : n.status == NodeStatus::kLost    ? "lost"
               : n.status == NodeStatus::kRevoked ? "revoked"
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

StatusOr<ExperimentState> RoundEngine::wait_until_finished(Clock::time_point deadline) const {
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

bool RoundEngine::wait_for_round(uint64_t round, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_until(lk, deadline, [&] {
    return experiment_.current_round >= round || experiment_.state == ExperimentState::kFailed ||
           experiment_.state == ExperimentState::kFinished;
  });
}

std::vector<std::pair<std::string, std::string>> RoundEngine::hydra_subnets() const {
  std::lock_guard<std::mutex> lk(mu_);
  return strategy_->subnets();
}

void RoundEngine::set_state_locked(ExperimentState s, const std::string& why) {
  if (experiment_.state == s) return;
  paused_by_store_ = false;  // an explicit change replaces a pause for the store
  experiment_.state = s;
  if (s == ExperimentState::kFailed) experiment_.failure = why;
  const Status written = store_.put_experiment(experiment_);
  audit("state", experiment_state_name(experiment_.state) + std::string(": ") + why);
  Event e{Event::Kind::kStateChanged};
  e.round = experiment_.current_round;
  e.message = experiment_state_name(experiment_.state);
  emit(std::move(e));
  if (experiment_.state == ExperimentState::kFailed) {
    Event f{Event::Kind::kFailed};
    f.round = experiment_.current_round;
    f.message = experiment_.failure;
    emit(std::move(f));
  }
  cv_.notify_all();
  // The change holds in memory; a running experiment pauses until the store takes it.
  if (!written.ok()) store_blocked_locked(written);
}

void RoundEngine::store_blocked_locked(const Status& why) {
  next_store_probe_ = Clock::now() + kStoreProbeInterval;
  // Kept here: the store's own flag is cleared by any small write that still fits.
  if (store_.full()) store_full_ = true;
  if (!store_blocked_) {
    store_blocked_ = true;
    Event e{Event::Kind::kStore};
    e.round = experiment_.current_round;
    e.message = why.message() +
                (store_.full()
                     ? "; the experiment is paused and resumes once " +
                           // Rounded up to 0.1 MiB: freeing what the line says is enough.
                           atl::shortest_decimal(std::ceil(commit_space_bytes() / 104857.6) / 10) +
                           " MiB are free there"
                     : "; the experiment is paused and resumes when the store can be written "
                       "again");
    emit(std::move(e));
  }
  if (experiment_.state == ExperimentState::kRunning) {
    paused_by_store_ = true;
    experiment_.state = ExperimentState::kPaused;
    audit("state", "paused: the store cannot be written");
    Event e{Event::Kind::kStateChanged};
    e.round = experiment_.current_round;
    e.message = experiment_state_name(experiment_.state);
    emit(std::move(e));
  }
  cv_.notify_all();
}

uint64_t RoundEngine::commit_space_bytes() const {
  // θ and momentum files (and the error feedback of broadcast pulls), fp32, plus 2 MiB for what
  // RocksDB writes beside them (the round and experiment records, the WAL it preallocates).
  const uint64_t vectors = pulls_.policy().broadcasts_updates() ? 3 : 2;
  return vectors * experiment_.numel * sizeof(float) + (uint64_t{2} << 20);
}

void RoundEngine::probe_store(std::unique_lock<std::mutex>& lk, Clock::time_point now) {
  if (!store_blocked_ || now < next_store_probe_) return;
  next_store_probe_ = now + kStoreProbeInterval;
  // A full disk: a small probe write can pass while the next commit still cannot, and each
  // false resume made every site redo the round (36 times a minute on a 2 MB tmpfs). Wait
  // for room for a commit.
  if (store_full_) {
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(store_.dir(), ec);
    if (!ec && space.available < commit_space_bytes()) return;
  }
  ExperimentRecord record = experiment_;
  if (paused_by_store_) record.state = ExperimentState::kRunning;
  // The store's I/O (a reopen replays its WAL) runs without the lock: calls keep being answered.
  lk.unlock();
  Status st = store_.put_experiment(record);
  // RocksDB refuses every write after a failed one until the store is opened again.
  if (!st.ok() && store_.recover().ok()) st = store_.put_experiment(record);
  lk.lock();
  if (!st.ok() || !store_blocked_) return;
  const ExperimentState now_state =
      paused_by_store_ ? ExperimentState::kRunning : experiment_.state;
  if (now_state != record.state) {  // changed meanwhile: write that next
    next_store_probe_ = Clock::now();
    return;
  }
  store_blocked_ = false;
  store_full_ = false;
  Event e{Event::Kind::kStore};
  e.round = experiment_.current_round;
  e.message = "store at " + store_.dir() + " can be written again" +
              (paused_by_store_ ? ": the experiment resumes at round " +
                                      std::to_string(experiment_.current_round)
                                : std::string());
  emit(std::move(e));
  if (paused_by_store_) {
    paused_by_store_ = false;
    experiment_.state = ExperimentState::kRunning;
    audit("state", "running: the store can be written again");
    Event r{Event::Kind::kStateChanged};
    r.round = experiment_.current_round;
    r.message = experiment_state_name(experiment_.state);
    emit(std::move(r));
    maybe_start_round_locked(Clock::now());
  }
  cv_.notify_all();
}

bool RoundEngine::is_participant_locked(const std::string& node) const {
  return round_.open &&
         std::binary_search(round_.participants.begin(), round_.participants.end(), node);
}

void RoundEngine::maybe_start_round_locked(Clock::time_point now) {
  if (stopping_ || round_.open || committing_ || experiment_.state != ExperimentState::kRunning)
    return;
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
    if (now - *quorum_since_ < duration_of_seconds(config_.diloco.start_wait_s)) return;
  }
  quorum_since_.reset();
  if (ready.size() > config_.diloco.max_nodes) ready.resize(config_.diloco.max_nodes);
  round_ = Round{};
  round_.open = true;
  round_.round = experiment_.current_round;
  round_.participants = ready;
  round_.started = now;
  round_.deadline = now + duration_of_seconds(config_.diloco.round_deadline_s);
  round_.deadline_unix_ms =
      unix_ms_now() + static_cast<uint64_t>(config_.diloco.round_deadline_s * 1000.0);
  for (const auto& id : ready) nodes_[id].ready = false;
  round_.scoring = strategy_->needs_scores(round_.round, round_.participants);
  if (config_.secagg.enabled)
    round_.secagg = std::make_shared<SecAggRound>(round_.round, round_.participants, config_.secagg,
                                                  config_.diloco.min_nodes, theta_->size());
  std::string list;
  for (const auto& id : ready) list += (list.empty() ? "" : ",") + id;
  audit("round_started", "round " + std::to_string(round_.round) + " participants " + list);
  Event e{Event::Kind::kRoundStarted};
  e.round = round_.round;
  e.participants = ready;
  emit(std::move(e));
  cv_.notify_all();
}

std::optional<RoundEngine::Commit> RoundEngine::maybe_close_round_locked(Clock::time_point now) {
  if (!round_.open) return std::nullopt;
  if (round_.scoring) {
    // Scoring phase: select once every live participant reported, or at the deadline.
    size_t waiting = 0;
    for (const auto& id : round_.participants) {
      auto it = nodes_.find(id);
      if (!round_.scores.count(id) && it != nodes_.end() &&
          it->second.status == NodeStatus::kActive)
        ++waiting;
    }
    if (waiting == 0 || now >= round_.deadline) finish_scoring_locked();
    return std::nullopt;
  }
  if (round_.secagg) return advance_secagg_locked(now);
  size_t outstanding = 0;  // live participants that have not pushed yet
  for (const auto& id : round_.participants) {
    if (round_.updates.count(id)) continue;
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second.status == NodeStatus::kActive) ++outstanding;
  }
  const size_t pushed = round_.updates.size();
  const size_t quorum = config_.diloco.min_nodes;
  if (outstanding == 0 && pushed >= quorum) return prepare_commit_locked(now);
  if (now >= round_.deadline) {
    if (pushed >= quorum) return prepare_commit_locked(now);
    restart_round_locked(
        "only " + std::to_string(pushed) + " of diloco.min_nodes = " + std::to_string(quorum) +
        " updates arrived before the " + shortest_decimal(config_.diloco.round_deadline_s) +
        " s deadline; raise diloco.round_deadline_s or lower diloco.min_nodes");
    return std::nullopt;
  }
  if (outstanding == 0 && round_.receiving.empty())
    restart_round_locked("every live participant is done but only " + std::to_string(pushed) +
                         " of diloco.min_nodes = " + std::to_string(quorum) + " updates arrived");
  return std::nullopt;
}

void RoundEngine::restart_round_locked(const std::string& why) {
  const uint64_t r = round_.round;
  round_ = Round{};
  round_.round = r;
  audit("round_restarted", "round " + std::to_string(r) + ": " + why);
  Event e{Event::Kind::kRoundRestarted};
  e.round = r;
  e.message = why;
  emit(std::move(e));
  cv_.notify_all();
  maybe_start_round_locked(Clock::now());
}

void RoundEngine::finish_scoring_locked() {
  // Participants that did not report by now leave the round; the rest need quorum.
  std::vector<std::string> kept;
  for (const auto& id : round_.participants)
    if (round_.scores.count(id)) kept.push_back(id);
  if (kept.size() < config_.diloco.min_nodes)
    return restart_round_locked("only " + std::to_string(kept.size()) +
                                " importance reports arrived, diloco.min_nodes = " +
                                std::to_string(config_.diloco.min_nodes));
  std::vector<ScoredNode> sites;
  for (const auto& id : kept)
    sites.push_back({id, nodes_.at(id).record.budget, round_.scores.at(id)});
  Status st = strategy_->select(
      round_.round, sites,
      [this](const std::string& event, const std::string& detail) { audit(event, detail); });
  if (!st.ok())
    return restart_round_locked(st.message() +
                                "; the round starts again with new importance scores");
  round_.participants = kept;
  round_.scoring = false;
  cv_.notify_all();
}

void RoundEngine::remember_version_locked(uint64_t round, const std::string& fp) {
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

RoundEngine::Commit RoundEngine::prepare_commit_locked(Clock::time_point now) {
  Commit c;
  c.round = round_.round;
  c.theta = theta_;
  c.momentum = momentum_;
  c.has_momentum = has_momentum_;
  c.feedback = feedback_;
  c.screening = screening_;
  RoundRecord& rec = c.record;
  rec.round = c.round;
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
      rec.tokens = add_saturating(rec.tokens, p.tokens);
      loss_weighted += p.loss * static_cast<double>(p.tokens);
    }
    rec.bytes_up += p.bytes_up;
    rec.bytes_down += p.bytes_down;
    rec.participants.push_back(std::move(p));
  }
  rec.late_bytes_down = std::move(late_bytes_down_);
  late_bytes_down_.clear();
  rec.mean_loss = rec.tokens ? loss_weighted / static_cast<double>(rec.tokens) : 0.0;
  rec.duration_s = std::chrono::duration<double>(now - round_.started).count();
  rec.aggregator = config_.robust.aggregator;
  // Every committed round so far counts, a skipped one too (it releases θ as well).
  if (config_.privacy.clip_norm > 0)
    rec.privacy_epsilon = algorithms::epsilon_after_rounds(
        c.round + 1, config_.privacy.noise_multiplier, config_.privacy.delta);
  c.next = experiment_;
  c.next.current_round = c.round + 1;
  if (c.next.current_round >= config_.diloco.rounds) c.next.state = ExperimentState::kFinished;
  c.updates = std::move(round_.updates);
  c.strategy_state = strategy_->committed_state();
  // The round is closed: no task, update or pull counts for it any more.
  round_ = Round{};
  round_.round = c.round;
  committing_ = true;
  cv_.notify_all();
  return c;
}

Status RoundEngine::screen_and_step(Commit& c, std::vector<float>& theta_next,
                                    std::vector<float>& momentum_next) {
  RoundRecord& rec = c.record;
  const std::string round = "round " + std::to_string(c.round);
  const bool private_round = config_.privacy.clip_norm > 0;
  // Replays first, so that a replayed update does not count in the round's median norm either.
  ScreenOutcome replays;
  const algorithms::ScreenOptions screening = screen_options(config_);
  const double replay_cosine =
      screening.mode == algorithms::ScreenMode::kOff ? 0.0 : config_.robust.replay_cosine;
  const double stale_margin =
      screening.mode == algorithms::ScreenMode::kOff ? 0.0 : config_.robust.stale_margin;
  const algorithms::compress::UpdateRange range = strategy_->synced_range(c.round);
  ReplayMemory sketched =
      screen_replays(c.updates, c.screening->replay, replay_cosine, range, replays);
  if (!(replay_cosine > 0) && stale_margin > 0) sketched = sketch_updates(c.updates, range);
  ScreenOutcome screened = screen_updates(c.updates, screening);
  screened.by_node.merge(replays.by_node);
  // Stale updates after the norm screening, so that a dropped huge update is no term of the
  // comparison (whose sums weigh each update as one anyway).
  StaleScreen stale = screen_stale(c.updates, sketched, *c.screening, stale_margin, screened);
  if (private_round) clip_updates_for_privacy(c.updates, config_.privacy.clip_norm, screened);
  // With [privacy] on, the median of the sites' norms is their data too: not recorded.
  rec.median_norm = private_round ? 0.0 : screened.median_norm;
  rec.norm_limit = screened.limit;
  for (ParticipantRecord& p : rec.participants) {
    auto s = screened.by_node.find(p.node_id);
    if (s == screened.by_node.end()) continue;
    // With [privacy] on, a site's norm (and whether it was over the clip) is its private data:
    // the operator's audit log has it, the round record (served by the API) does not.
    if (!private_round) {
      p.norm = s->second.norm;
      p.screen = algorithms::screen_action_name(s->second.action);
      p.screen_reason = s->second.reason;
    }
    if (!s->second.why.empty())
      audit("update_screened", p.node_id + " " + round + ": " + s->second.why);
  }
  ATOLL_ASSIGN_OR_RETURN(const StepOutcome step,
                         apply_finite_step(*strategy_, c.round, c.updates, c.has_momentum, *c.theta,
                                           *c.momentum, theta_next, momentum_next));
  for (const std::string& id : step.dropped_nonfinite) {
    for (ParticipantRecord& p : rec.participants)
      if (p.node_id == id) {
        p.screen = algorithms::screen_action_name(algorithms::ScreenAction::kDropped);
        p.screen_reason = "nonfinite";
      }
    audit("update_screened", id + " " + round + ": dropped: the outer step with it is not finite");
  }
  // c.updates now holds the updates the step used: they become their nodes' previous ones.
  if (replay_cosine > 0 || stale_margin > 0) {
    ScreeningMemory next;
    next.replay = remember_accepted(c.screening->replay, std::move(sketched), c.updates);
    if (stale_margin > 0) {
      for (const auto& applied : c.updates) next.applied_last_round.insert(applied.first);
      next.stale_history =
          extend_stale_history(c.screening->stale_history, std::move(stale.kept_figures));
    }
    c.screening = std::make_shared<const ScreeningMemory>(std::move(next));
  }
  rec.skipped = step.skipped;
  c.stepped = !step.skipped;
  if (step.skipped)
    audit("round_skipped", round + ": no update could be applied; θ and momentum are unchanged");
  return Status::Ok();
}

Status RoundEngine::compress_update(const Commit& c, std::vector<float>& theta_next,
                                    std::vector<float>& feedback_next,
                                    std::vector<uint8_t>& message) const {
  feedback_next = *c.feedback;
  message.clear();
  if (!c.stepped) return Status::Ok();  // θ_{r+1} = θ_r: nothing to send, e stays
  auto encoded =
      algorithms::compress::compress_outer_update(pulls_.policy().update, *c.theta, theta_next,
                                                  feedback_next, strategy_->synced_range(c.round));
  if (!encoded.ok())
    return Status(encoded.status().code(),
                  "the outer update could not be encoded with diloco.pull_codec = \"" +
                      config_.diloco.pull_codec + "\": " + encoded.status().message());
  message = std::move(encoded).value();
  return Status::Ok();
}

void RoundEngine::commit(Commit c) {
  // Without the lock: θ_r and its momentum are immutable snapshots, the updates are ours.
  const Clock::time_point started = Clock::now();
  std::vector<float> theta_next, momentum_next, feedback_next;
  std::vector<uint8_t> update_message;
  Status outer = c.secagg ? unmask_into_updates(c) : Status::Ok();
  if (outer.ok()) outer = screen_and_step(c, theta_next, momentum_next);
  if (outer.ok() && c.feedback) outer = compress_update(c, theta_next, feedback_next, update_message);
  RoundRecord& rec = c.record;
  rec.params_fingerprint = algorithms::params_fingerprint(theta_next);
  rec.momentum_fingerprint = algorithms::params_fingerprint(momentum_next);
  rec.committed_unix_ms = unix_ms_now();
  c.next.params_fingerprint = rec.params_fingerprint;
  const BroadcastCommit broadcast{
      feedback_next, std::string_view(reinterpret_cast<const char*>(update_message.data()),
                                      update_message.size())};
  const std::string replay_bytes = outer.ok() && !c.screening->replay.empty()
                                       ? encode_screening_memory(*c.screening)
                                       : std::string();
  const Status written = outer.ok() ? store_.commit_round(c.next, rec, theta_next, momentum_next,
                                                          c.feedback ? &broadcast : nullptr,
                                                          replay_bytes, c.strategy_state)
                                    : Status::Ok();
  c.commit_s = std::chrono::duration<double>(Clock::now() - started).count();
  // θ_{r+1}, its momentum and the error feedback become immutable snapshots too.
  c.theta = std::make_shared<const std::vector<float>>(std::move(theta_next));
  c.momentum = std::make_shared<const std::vector<float>>(std::move(momentum_next));
  if (c.feedback) c.feedback = std::make_shared<const std::vector<float>>(std::move(feedback_next));
  c.updates.clear();
  // θ_r and its momentum are freed after the lock is released (hundreds of MB).
  std::shared_ptr<const std::vector<float>> old_theta, old_momentum, old_feedback;
  std::lock_guard<std::mutex> lk(mu_);
  old_theta = theta_;
  old_momentum = momentum_;
  old_feedback = feedback_;
  publish_commit_locked(c, outer, written);
}

void RoundEngine::publish_commit_locked(Commit& c, const Status& outer, const Status& written) {
  const uint64_t r = c.round;
  committing_ = false;
  if (!outer.ok() || !written.ok()) {
    // Nothing was committed: θ_r stays the current state, in memory and in the store, and the
    // round is done again (nodes redo it from the state they saved at its start). A store that
    // cannot be written pauses the experiment until it can.
    round_ = Round{};
    round_.round = r;
    if (!written.ok()) store_blocked_locked(written);
    restart_round_locked(
        !outer.ok()
            ? "round " + std::to_string(r) + ": " + outer.message() + "; its updates are discarded"
            : "round " + std::to_string(r) + " could not be committed: " + written.message());
    return;
  }
  experiment_ = c.next;
  // c.next was copied when the round closed; a site that joined since may have set it.
  experiment_.site_tokenizer = site_tokenizer_;
  remember_version_locked(r + 1, c.record.params_fingerprint);
  theta_ = std::move(c.theta);
  momentum_ = std::move(c.momentum);
  feedback_ = std::move(c.feedback);
  screening_ = std::move(c.screening);
  // A skipped round leaves the momentum as it was, including whether it exists yet.
  has_momentum_ = has_momentum_ || c.stepped;
  round_ = Round{};
  round_.round = r + 1;
  Event e{Event::Kind::kRoundCommitted};
  e.round = r;
  e.record = c.record;
  e.params = theta_;
  e.commit_s = c.commit_s;
  emit(std::move(e));
  if (experiment_.state == ExperimentState::kFinished) {
    audit("state", "finished");
    Event f{Event::Kind::kFinished};
    f.round = experiment_.current_round;
    f.message = "finished after " + std::to_string(experiment_.current_round) + " rounds";
    emit(std::move(f));
  }
  cv_.notify_all();
  maybe_start_round_locked(Clock::now());
}

void RoundEngine::check_lost_locked(Clock::time_point now) {
  for (auto& [id, n] : nodes_) {
    // Polling, pulling θ or pushing Δ (receiving) is being alive; a dead peer ends its stream
    // when the connection fails.
    if (n.status != NodeStatus::kActive || n.polling > 0 || n.pulling > 0 ||
        (round_.open && round_.receiving.count(id)))
      continue;
    if (now - n.last_seen <= lost_timeout_) continue;
    end_membership_locked(
        id, NodeStatus::kLost,
        "no heartbeat for " + std::to_string(config_.diloco.lost_after_heartbeats) + " intervals");
  }
}

void RoundEngine::ticker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    check_lost_locked(now);
    probe_store(lk, now);
    if (stopping_) break;
    if (std::optional<Commit> c = maybe_close_round_locked(Clock::now())) {
      lk.unlock();
      commit(std::move(*c));
      lk.lock();
      continue;
    }
    maybe_start_round_locked(now);
    // Next wake-up: a fraction of the heartbeat interval (lost detection), the round deadline
    // and the end of a start wait, whichever comes first. Any state change also wakes us.
    Clock::time_point wake =
        now + std::max<Clock::duration>(heartbeat_interval_ / 4, std::chrono::milliseconds(10));
    if (round_.open) wake = std::min(wake, round_.deadline);
    if (quorum_since_)
      wake = std::min(wake, *quorum_since_ + duration_of_seconds(config_.diloco.start_wait_s));
    if (store_blocked_) wake = std::min(wake, next_store_probe_);
    cv_.wait_until(lk, wake);
  }
}

void RoundEngine::emit(Event e) {
  if (!options_.on_event) return;
  e.experiment_id = experiment_id_;
  {
    std::lock_guard<std::mutex> lk(event_mu_);
    outbox_.emplace_back(std::move(e));
  }
  event_cv_.notify_one();
}

void RoundEngine::audit(const std::string& event, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lk(event_mu_);
    outbox_.emplace_back(AuditLine{event, detail});
  }
  event_cv_.notify_one();
}

void RoundEngine::event_loop() {
  std::unique_lock<std::mutex> lk(event_mu_);
  for (;;) {
    event_cv_.wait(lk, [&] { return events_stop_ || !outbox_.empty(); });
    if (outbox_.empty()) return;  // stop requested and drained
    std::variant<Event, AuditLine> item = std::move(outbox_.front());
    outbox_.pop_front();
    lk.unlock();
    if (const Event* e = std::get_if<Event>(&item)) {
      options_.on_event(*e);
    } else {
      // The audit log is best effort: it never blocks progress.
      const AuditLine& a = std::get<AuditLine>(item);
      (void)store_.append_audit(experiment_id_, a.event, a.detail);
    }
    lk.lock();
  }
}

}  // namespace atl::coordinator
