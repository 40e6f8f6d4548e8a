#include "coordinator/coordinator_metrics.h"

#include <mutex>

#include "coordinator/experiment_manager.h"

namespace atl::coordinator {

namespace tm = transport::metrics;

const std::vector<double>& round_duration_buckets() {
  static const std::vector<double> b = {0.5, 1,   2.5, 5,    10,   30,  60,
                                        120, 300, 600, 1800, 3600, 7200};
  return b;
}

const std::vector<double>& push_duration_buckets() {
  static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                        1,     2.5,  5,     10,   30,  60,   120};
  return b;
}

namespace {

constexpr const char* kBytesHelp =
    "Payload bytes between the coordinator and its nodes: up = updates received, down = "
    "parameters sent.";
constexpr const char* kNodesHelp =
    "Nodes of the live experiment by state, as this coordinator process has seen them.";

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(const ExperimentManager* manager)
    : manager_(manager),
      rounds_committed_(
          registry_.counter("atoll_rounds_committed_total", "Rounds committed to the store.")),
      rounds_restarted_(registry_.counter(
          "atoll_rounds_restarted_total",
          "Rounds restarted with the parameters unchanged because no quorum was reached.")),
      updates_accepted_(
          registry_.counter("atoll_updates_accepted_total", "Node updates accepted.")),
      tokens_(registry_.counter("atoll_tokens_total",
                                "Training tokens of the accepted updates of committed rounds.")),
      bytes_up_(registry_.counter("atoll_bytes_total", kBytesHelp, {{"direction", "up"}})),
      bytes_down_(registry_.counter("atoll_bytes_total", kBytesHelp, {{"direction", "down"}})),
      round_(registry_.gauge("atoll_current_round",
                             "The live experiment's current round (rounds committed so far).")),
      nodes_active_(registry_.gauge("atoll_nodes", kNodesHelp, {{"state", "active"}})),
      nodes_lost_(registry_.gauge("atoll_nodes", kNodesHelp, {{"state", "lost"}})),
      nodes_left_(registry_.gauge("atoll_nodes", kNodesHelp, {{"state", "left"}})),
      nodes_revoked_(registry_.gauge("atoll_nodes", kNodesHelp, {{"state", "revoked"}})),
      round_duration_(registry_.histogram("atoll_round_duration_seconds",
                                          "Committed rounds, from their start to their close (the "
                                          "commit follows: atoll_round_commit_seconds).",
                                          round_duration_buckets())),
      push_duration_(registry_.histogram(
          "atoll_push_duration_seconds",
          "Accepted pushes, from the first chunk to the answer (for the update that completes "
          "a round, the commit included).",
          push_duration_buckets())),
      commit_duration_(registry_.histogram(
          "atoll_round_commit_seconds",
          "Committed rounds, from their close to the commit on disk: screening, the outer step, "
          "the broadcast's encoding and the store's synced write.",
          push_duration_buckets())) {
  // Every reason at 0 from the start, so that rate() and increase() see the first rejection.
  for (const char* reason : update_rejection_reasons())
    registry_.counter("atoll_updates_rejected_total", "Node updates refused, by reason.",
                      {{"reason", reason}});
  for (const char* reason : {"norm", "replay", "stale", "nonfinite"})
    registry_.counter("atoll_updates_screened_total",
                      "Updates clipped or dropped by the commit's screening, by action and "
                      "check (norm, replay, stale, privacy, nonfinite).",
                      {{"action", "dropped"}, {"reason", reason}});
  tm::add_process_metrics(registry_);
  registry_.add_collector([this] { collect_live(); });
}

void CoordinatorMetrics::observe(const std::string& experiment_id, const Event& e) {
  using K = Event::Kind;
  switch (e.kind) {
    case K::kRoundCommitted:
      rounds_committed_.add();
      if (e.record) {
        tokens_.add(static_cast<double>(e.record->tokens));
        round_duration_.observe(e.record->duration_s);
        commit_duration_.observe(e.commit_s);
        std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
        ExperimentGauges& g = experiment_gauges_[experiment_id];
        g.train_loss = e.record->mean_loss;
        // Only an experiment with [privacy] on has an ε (+Inf: clipping only).
        if (e.record->privacy_epsilon != -1.0) g.privacy_epsilon = e.record->privacy_epsilon;
        latest_experiment_ = experiment_id;
      }
      if (!manager_) round_.set(static_cast<double>(e.round + 1));
      if (e.record)
        for (const ParticipantRecord& p : e.record->participants)
          if (p.screen == "clipped" || p.screen == "dropped")
            registry_
                .counter("atoll_updates_screened_total",
                         "Updates clipped or dropped by the commit's screening, by action and "
                         "check (norm, replay, stale, privacy, nonfinite).",
                         {{"action", p.screen},
                          {"reason", p.screen_reason.empty() ? "other" : p.screen_reason}})
                .add();
      break;
    case K::kRoundRestarted:
      rounds_restarted_.add();
      break;
    case K::kUpdateAccepted:
      updates_accepted_.add();
      break;
    case K::kUpdateRejected:
      registry_
          .counter("atoll_updates_rejected_total", "Node updates refused, by reason.",
                   {{"reason", e.reason.empty() ? "other" : e.reason}})
          .add();
      break;
    default:
      break;
  }
}

void CoordinatorMetrics::add_bytes_down(uint64_t bytes) {
  bytes_down_.add(static_cast<double>(bytes));
}

void CoordinatorMetrics::add_bytes_up(uint64_t bytes) {
  bytes_up_.add(static_cast<double>(bytes));
}

void CoordinatorMetrics::observe_push(double seconds) {
  push_duration_.observe(seconds);
}

void CoordinatorMetrics::set_validation_bpb(const std::string& experiment_id,
                                            double bits_per_byte) {
  // Shown from the first evaluation: a coordinator without --eval-data has no such series.
  std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
  experiment_gauges_[experiment_id].validation_bpb = bits_per_byte;
  latest_experiment_ = experiment_id;
}

std::string CoordinatorMetrics::latest_experiment() const {
  std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
  return latest_experiment_;
}

void CoordinatorMetrics::publish_experiment_gauges(const std::string& experiment_id) {
  ExperimentGauges shown;
  {
    std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
    if (auto it = experiment_gauges_.find(experiment_id); it != experiment_gauges_.end())
      shown = it->second;
    // With a manager, another experiment's values can no longer be shown: a stored
    // experiment made live again starts without them, as a new one does.
    if (manager_) {
      std::erase_if(experiment_gauges_,
                    [&](const auto& entry) { return entry.first != experiment_id; });
      std::erase_if(restored_, [&](const std::string& id) { return id != experiment_id; });
    }
  }
  registry_.set_optional_gauge(
      "atoll_train_loss",
      "Token-weighted mean inner training loss (nats) of the live experiment's last committed "
      "round.",
      shown.train_loss);
  registry_.set_optional_gauge(
      "atoll_validation_bits_per_byte",
      "Global validation bits per byte of the live experiment's latest evaluated parameters.",
      shown.validation_bpb);
  registry_.set_optional_gauge(
      "atoll_privacy_epsilon",
      "Differential privacy: epsilon spent after the live experiment's last committed round, at "
      "its privacy.delta.",
      shown.privacy_epsilon);
}

namespace {

// Counters that mirror counts kept elsewhere (they only grow): each render adds what is new.
// Two scrapes at once run the collectors at once, hence the lock around read-and-add.
std::mutex g_mirror_mu;
void mirror(tm::Counter& counter, uint64_t count) {
  std::lock_guard<std::mutex> lk(g_mirror_mu);
  const double now = static_cast<double>(count);
  if (now > counter.value()) counter.add(now - counter.value());
}

}  // namespace

void CoordinatorMetrics::watch_port(const std::string& port, std::function<size_t()> open,
                                    std::function<uint64_t()> refused,
                                    std::function<uint64_t()> evicted) {
  tm::Gauge& open_now = registry_.gauge(
      "atoll_connections", "Connections open now, by listening port (grpc, bulk, dashboard).",
      {{"port", port}});
  tm::Counter& refused_total = registry_.counter(
      "atoll_connections_refused_total",
      "Connections closed at once because a connection cap was reached, by listening port.",
      {{"port", port}});
  tm::Counter* evicted_total =
      evicted ? &registry_.counter("atoll_connections_evicted_total",
                                   "Idle connections closed to make room for a new one, by "
                                   "listening port.",
                                   {{"port", port}})
              : nullptr;
  registry_.add_collector([&open_now, &refused_total, evicted_total, open = std::move(open),
                           refused = std::move(refused), evicted = std::move(evicted)] {
    open_now.set(static_cast<double>(open()));
    mirror(refused_total, refused());
    if (evicted_total) mirror(*evicted_total, evicted());
  });
}

void CoordinatorMetrics::watch_bulk_lane(std::function<uint64_t()> pulls_sent,
                                         std::function<uint64_t()> pushes_received) {
  constexpr const char* kHelp =
      "Whole transfers over the bulk lane: down = pulls sent, up = pushes received and checked.";
  tm::Counter& down = registry_.counter("atoll_bulk_lane_transfers_total", kHelp,
                                        {{"direction", "down"}});
  tm::Counter& up = registry_.counter("atoll_bulk_lane_transfers_total", kHelp,
                                      {{"direction", "up"}});
  registry_.add_collector([&down, &up, pulls = std::move(pulls_sent),
                           pushes = std::move(pushes_received)] {
    mirror(down, pulls());
    mirror(up, pushes());
  });
}

void CoordinatorMetrics::restore_gauges(const CoordinatorService& live) {
  const std::string id = live.experiment_id();
  const uint64_t round = live.current_round();
  {
    std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
    if (round == 0 || !restored_.insert(id).second) return;
  }
  auto last = manager_->rounds(id, round - 1, 1);
  if (!last.ok() || last->empty()) return;
  const RoundRecord& rec = last->back();
  std::lock_guard<std::mutex> lk(experiment_gauges_mu_);
  ExperimentGauges& g = experiment_gauges_[id];
  if (!g.train_loss) g.train_loss = rec.mean_loss;  // a commit since then is newer
  if (!g.privacy_epsilon && rec.privacy_epsilon != -1.0) g.privacy_epsilon = rec.privacy_epsilon;
}

void CoordinatorMetrics::collect_live() {
  if (!manager_) return publish_experiment_gauges(latest_experiment());
  const std::shared_ptr<CoordinatorService> live = manager_->live();
  if (live) restore_gauges(*live);
  publish_experiment_gauges(live ? live->experiment_id() : "");
  if (!live) {
    registry_.set_info("atoll_experiment_info", "The live experiment (value 1).", {});
    return;
  }
  round_.set(static_cast<double>(live->current_round()));
  double active = 0, lost = 0, left = 0, revoked = 0;
  for (const NodeSnapshot& n : live->nodes()) {
    if (n.status == "active") active += 1;
    if (n.status == "lost") lost += 1;
    if (n.status == "left") left += 1;
    if (n.status == "revoked") revoked += 1;
  }
  nodes_active_.set(active);
  nodes_lost_.set(lost);
  nodes_left_.set(left);
  nodes_revoked_.set(revoked);
  registry_.set_info(
      "atoll_experiment_info", "The live experiment (value 1).",
      {{"experiment", live->experiment_id()}, {"algorithm", live->engine().config().algorithm}});
}

std::string CoordinatorMetrics::render() const {
  return registry_.render();
}

}  // namespace atl::coordinator
