#include "coordinator/experiment_manager.h"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "algorithms/compress/codec.h"
#include "algorithms/diloco/outer.h"
#include "algorithms/model/llama.h"
#include "coordinator/json_views.h"

namespace atl::coordinator {
namespace json = boost::json;

namespace {

const char* node_event_name(Event::Kind k) {
  switch (k) {
    case Event::Kind::kNodeJoined:
      return "joined";
    case Event::Kind::kNodeLost:
      return "lost";
    case Event::Kind::kNodeRevoked:
      return "revoked";
    default:
      return "left";
  }
}

// One stored ReportMetrics record ({"node", "round", "metrics": {name: value}}), or nullopt when
// the text is not such a record (skipped: the store keeps what nodes sent).
struct MetricsReport {
  std::string node;
  double round = -1;   // the round the values describe (>= 0)
  json::value parsed;  // the whole record; metrics() is its "metrics" object
  const json::object& metrics() const { return parsed.as_object().at("metrics").as_object(); }
};
std::optional<MetricsReport> parse_metrics_report(const std::string& text) {
  boost::system::error_code ec;
  MetricsReport out;
  out.parsed = json::parse(text, ec);
  if (ec || !out.parsed.is_object()) return std::nullopt;
  const auto& o = out.parsed.get_object();
  const auto* node = o.if_contains("node");
  const auto* round = o.if_contains("round");
  const auto* values = o.if_contains("metrics");
  if (!node || !node->is_string() || !round || !values || !values->is_object()) return std::nullopt;
  out.round = round->is_uint64()  ? static_cast<double>(round->get_uint64())
              : round->is_int64() ? static_cast<double>(round->get_int64())
                                  : -1;
  if (out.round < 0) return std::nullopt;
  out.node = std::string(node->get_string());
  return out;
}

}  // namespace

ExperimentManager::ExperimentManager(Store& store, ManagerOptions options)
    : store_(store), options_(std::move(options)) {}

void ExperimentManager::attach(std::shared_ptr<CoordinatorService> service) {
  std::shared_ptr<CoordinatorService> release;  // destroyed after the lock
  std::unique_lock<std::shared_mutex> lk(svc_mu_);
  release = std::exchange(service_, std::move(service));
  if (options_.router) (void)options_.router->set(service_);
}

void ExperimentManager::attach(CoordinatorService* service) {
  attach(service ? std::shared_ptr<CoordinatorService>(service, [](CoordinatorService*) {})
                 : nullptr);
}

void ExperimentManager::set_node_address(const std::string& address) {
  std::unique_lock<std::shared_mutex> lk(svc_mu_);
  node_address_ = address;
}

std::shared_ptr<CoordinatorService> ExperimentManager::live() const {
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  return service_;
}

bool ExperimentManager::is_live(const std::string& id) const {
  return service_ != nullptr && service_->experiment_id() == id;
}

uint64_t ExperimentManager::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lk(listeners_mu_);
  const uint64_t id = next_listener_++;
  listeners_.emplace(id, std::move(listener));
  return id;
}

void ExperimentManager::unsubscribe(uint64_t id) {
  std::lock_guard<std::mutex> lk(listeners_mu_);
  listeners_.erase(id);
}

void ExperimentManager::emit(ManagerEvent e) {
  std::lock_guard<std::mutex> lk(listeners_mu_);
  for (auto& [id, l] : listeners_) l(e);
}

void ExperimentManager::on_event(const Event& e) {
  std::string experiment;
  {
    std::shared_lock<std::shared_mutex> lk(svc_mu_);
    if (!service_) return;
    experiment = service_->experiment_id();
  }
  on_event(experiment, e);
}

void ExperimentManager::on_event(const std::string& experiment, const Event& e) {
  using K = Event::Kind;
  json::object o;
  o["round"] = e.round;
  std::string kind;
  switch (e.kind) {
    case K::kStateChanged:
      kind = "state";
      o["state"] = e.message;
      break;
    case K::kFinished:
    case K::kFailed:
      kind = "state";
      o["state"] = e.kind == K::kFinished ? "finished" : "failed";
      o["message"] = e.message;
      break;
    case K::kNodeJoined:
    case K::kNodeLost:
    case K::kNodeLeft:
    case K::kNodeRevoked:
      kind = "node";
      o["node_id"] = e.node_id;
      o["event"] = node_event_name(e.kind);
      break;
    case K::kRoundStarted: {
      kind = "round_started";
      json::array ps;
      for (const auto& p : e.participants) ps.push_back(json::string(p));
      o["participants"] = std::move(ps);
      break;
    }
    case K::kRoundCommitted:
      if (!e.record) return;
      kind = "round";
      o = to_json(*e.record);
      break;
    case K::kMetrics: {
      kind = "metrics";
      o["node_id"] = e.node_id;
      json::object m;
      for (const auto& [name, v] : e.metrics) m[name] = json_number(v);
      o["metrics"] = std::move(m);
      break;
    }
    case K::kUpdateAccepted:
    case K::kUpdateRejected:
    case K::kRoundRestarted:
    case K::kStore:
    case K::kSecAggDeadline:
      kind = "log";
      o["event"] = event_kind_name(e.kind);
      o["node_id"] = e.node_id;
      o["message"] = e.message;
      break;
  }
  emit({experiment, kind, json::serialize(o)});
}

Status ExperimentManager::publish_metric(const std::string& experiment_id, uint64_t round,
                                         const std::string& name, double value) {
  if (!std::isfinite(value)) return InvalidArgument("metric '" + name + "' is not finite");
  json::object o;
  o["node"] = kCoordinatorNode;
  o["round"] = round;
  o["unix_ms"] = unix_ms_now();
  o["metrics"] = json::object{{name, value}};
  ATOLL_RETURN_IF_ERROR(
      store_.put_metrics(experiment_id, kCoordinatorNode, round, json::serialize(o)));
  json::object ev{{"round", round}, {"name", name}, {"value", value}};
  emit({experiment_id, "eval", json::serialize(ev)});
  return Status::Ok();
}

StatusOr<std::optional<double>> ExperimentManager::published_metric(
    const std::string& experiment_id, uint64_t round, const std::string& name) const {
  ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> reports,
                         store_.list_metrics(experiment_id, kCoordinatorNode));
  for (const std::string& text : reports) {
    const auto report = parse_metrics_report(text);
    if (!report || report->round != static_cast<double>(round)) continue;
    const json::value* value = report->metrics().if_contains(name);
    if (value && value->is_number()) return std::optional<double>(value->to_number<double>());
  }
  return std::optional<double>();
}

StatusOr<ExperimentSummary> ExperimentManager::summarize(const ExperimentRecord& record) const {
  ExperimentSummary s;
  s.record = record;
  if (auto cfg = parse_experiment_config(record.config_toml, "stored config"); cfg.ok())
    s.config = *cfg;
  s.node_address = node_address_;
  if (is_live(record.id)) {
    s.live = true;
    // The service's view is newer than the store's for lifecycle changes in flight.
    s.record.state = service_->state();
    s.record.current_round = service_->current_round();
    for (const auto& n : service_->nodes())
      if (n.status == "active") ++s.active_nodes;
  }
  return s;
}

StatusOr<ExperimentSummary> ExperimentManager::create(const ExperimentConfig& requested) {
  ATOLL_RETURN_IF_ERROR(validate_experiment_config(requested, "config"));
  ExperimentConfig config = requested;
  if (config.is_lora()) {
    if (!options_.resolve_base)
      return FailedPrecondition("config: [lora] needs a coordinator that reads base checkpoints");
    ATOLL_RETURN_IF_ERROR(options_.resolve_base(config));
    ATOLL_RETURN_IF_ERROR(validate_experiment_config(config, "config"));
  }
  if (config.train.codec != "none") {
    auto c = algorithms::compress::Codec::create(config.train.codec);
    if (!c.ok()) return InvalidArgument("config: train.codec: " + c.status().message());
  }
  // The shared check of every config reader, with this coordinator's cap.
  ATOLL_RETURN_IF_ERROR(check_model_size(config, "config", options_.max_params));
  if (config.is_lora())
    if (Status s = algorithms::validate(lora_config(config), model_config(config)); !s.ok())
      return InvalidArgument("config: lora: " + s.message());
  if (store_.load_experiment(config.name).ok())
    return AlreadyExists("config: name = \"" + config.name +
                         "\" is taken: an experiment with that name exists");
  const algorithms::ParamSet theta0 = initial_theta(config);
  ExperimentRecord e;
  e.id = config.name;
  e.state = ExperimentState::kCreated;
  e.current_round = 0;
  e.params_fingerprint = theta0.fingerprint();
  e.layout_fingerprint = algorithms::layout_fingerprint(theta0.layout());
  e.numel = theta0.numel();
  e.config_toml = to_toml(config);
  // The stored TOML is what every later start reads: it must read back as this config. Every
  // UTF-8 string round-trips (toml_string escapes control characters); should one not, the
  // create is refused now rather than the start failing later.
  const ConfigCheck stored = check_experiment_config(e.config_toml, "stored config");
  if (!stored.errors.empty() || to_toml(stored.config) != e.config_toml)
    return InvalidArgument("this config cannot be stored as TOML and read back (" +
                           (stored.errors.empty() ? std::string("it reads back different")
                                                  : stored.errors.front().message()) +
                           "); send its strings as UTF-8 text");
  e.created_unix_ms = unix_ms_now();
  ATOLL_ASSIGN_OR_RETURN(e.privacy_noise_key, new_privacy_noise_key(config));
  ATOLL_RETURN_IF_ERROR(store_.create_experiment(e, theta0.vec()));
  (void)store_.append_audit(e.id, "create", "created from the API");
  emit({e.id, "experiments", json::serialize(json::object{{"id", e.id}, {"event", "created"}})});
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  return summarize(e);
}

StatusOr<std::vector<ExperimentSummary>> ExperimentManager::list() const {
  ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> ids, store_.list_experiments());
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  std::vector<ExperimentSummary> out;
  for (const auto& id : ids) {
    ATOLL_ASSIGN_OR_RETURN(ExperimentRecord r, store_.load_experiment(id));
    ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, summarize(r));
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<ExperimentSummary> ExperimentManager::get(const std::string& id) const {
  if (!valid_id(id)) return NotFound("experiment '" + id + "' does not exist");
  ATOLL_ASSIGN_OR_RETURN(ExperimentRecord r, store_.load_experiment(id));
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  return summarize(r);
}

namespace {
// The audit detail of an experiment the API made live (ExperimentManager::left_running).
constexpr const char* kLiveFromApi = "made live and started from the API";
}  // namespace

Status ExperimentManager::switch_to_locked(const std::string& id,
                                           std::shared_ptr<CoordinatorService>* release) {
  if (service_ && service_->state() == ExperimentState::kRunning)
    return FailedPrecondition("experiment '" + service_->experiment_id() +
                              "' is running; pause or stop it first");
  if (!options_.open_service || !options_.router) {
    const std::string live = service_ ? "'" + service_->experiment_id() + "'" : "none";
    return FailedPrecondition("experiment '" + id +
                              "' is not served by this coordinator (it serves " + live +
                              "); serve it with `" + options_.serve_hint + "` using its config");
  }
  // An in-process run (`atoll simulate`) has no address nodes could reach: an experiment made
  // live here could never get a node.
  if (node_address_.empty())
    return FailedPrecondition("this process serves no nodes (its sites run in-process), so '" + id +
                              "' cannot run here; start it under `atoll coordinator`");
  ATOLL_ASSIGN_OR_RETURN(ExperimentRecord r, store_.load_experiment(id));
  if (r.state == ExperimentState::kFinished || r.state == ExperimentState::kFailed)
    return FailedPrecondition("experiment '" + id + "' is " + experiment_state_name(r.state) +
                              " and cannot be started again");
  ATOLL_ASSIGN_OR_RETURN(ExperimentConfig cfg,
                         parse_experiment_config(r.config_toml, "experiment '" + id + "'"));
  ATOLL_ASSIGN_OR_RETURN(std::shared_ptr<CoordinatorService> svc, options_.open_service(r, cfg));
  if (Status st = svc->start(); !st.ok()) {
    *release = std::move(svc);
    return st;
  }
  *release = std::exchange(service_, std::move(svc));
  (void)options_.router->set(service_);
  (void)store_.append_audit(id, "live", kLiveFromApi);
  return Status::Ok();
}

Status ExperimentManager::start(const std::string& id) {
  ATOLL_RETURN_IF_ERROR(get(id).status());
  std::shared_ptr<CoordinatorService> release;  // destroyed after the lock
  {
    std::unique_lock<std::shared_mutex> lk(svc_mu_);
    if (is_live(id)) {
      if (service_->state() == ExperimentState::kPaused)
        return FailedPrecondition("experiment '" + id + "' is paused; resume it instead");
      return service_->start();
    }
    ATOLL_RETURN_IF_ERROR(switch_to_locked(id, &release));
  }
  emit({id, "experiments", json::serialize(json::object{{"id", id}, {"event", "live"}})});
  return Status::Ok();
}

Status ExperimentManager::resume(const std::string& id) {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  if (s.record.state != ExperimentState::kPaused)
    return FailedPrecondition("experiment '" + id + "' is " +
                              experiment_state_name(s.record.state) + ", not paused");
  std::shared_ptr<CoordinatorService> release;  // destroyed after the lock
  {
    std::unique_lock<std::shared_mutex> lk(svc_mu_);
    if (is_live(id)) return service_->start();
    ATOLL_RETURN_IF_ERROR(switch_to_locked(id, &release));
  }
  emit({id, "experiments", json::serialize(json::object{{"id", id}, {"event", "live"}})});
  return Status::Ok();
}

Status ExperimentManager::pause(const std::string& id) {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  if (!is_live(id))
    return FailedPrecondition("experiment '" + id + "' is " +
                              experiment_state_name(s.record.state) +
                              " and not served by this coordinator; nothing to pause");
  return service_->pause();
}

Status ExperimentManager::stop(const std::string& id) {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  if (is_live(id)) return service_->stop("stopped from the API");
  ExperimentRecord r = s.record;
  if (r.state == ExperimentState::kFinished || r.state == ExperimentState::kFailed)
    return FailedPrecondition("experiment '" + id + "' is already " +
                              experiment_state_name(r.state));
  r.state = ExperimentState::kFinished;
  ATOLL_RETURN_IF_ERROR(store_.put_experiment(r));
  (void)store_.append_audit(id, "state", "finished: stopped from the API");
  emit({id, "state",
        json::serialize(json::object{{"state", "finished"}, {"round", r.current_round}})});
  return Status::Ok();
}

StatusOr<std::optional<ExperimentManager::LeftRunning>> ExperimentManager::left_running(
    const std::string& served) const {
  ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> ids, store_.list_experiments());
  for (const std::string& id : ids) {
    if (id == served) continue;
    ATOLL_ASSIGN_OR_RETURN(ExperimentRecord r, store_.load_experiment(id));
    if (r.state != ExperimentState::kRunning) continue;
    ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> audit, store_.list_audit(id));
    std::string last_live;  // the latest "live" line's detail (audit keys sort by time)
    for (const std::string& line : audit) {
      boost::system::error_code ec;
      const json::value v = json::parse(line, ec);
      if (ec || !v.is_object()) continue;
      const json::object& o = v.as_object();
      const json::value* event = o.if_contains("event");
      const json::value* detail = o.if_contains("detail");
      if (event && event->is_string() && event->as_string() == "live" && detail &&
          detail->is_string())
        last_live = std::string(detail->as_string());
    }
    return std::optional<LeftRunning>(LeftRunning{id, last_live == kLiveFromApi});
  }
  return std::optional<LeftRunning>();
}

Status ExperimentManager::pause_left_running(const std::string& id, const std::string& why) {
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  if (is_live(id)) return FailedPrecondition("experiment '" + id + "' is live here");
  ATOLL_ASSIGN_OR_RETURN(ExperimentRecord r, store_.load_experiment(id));
  if (r.state != ExperimentState::kRunning) return Status::Ok();
  r.state = ExperimentState::kPaused;
  ATOLL_RETURN_IF_ERROR(store_.put_experiment(r));
  (void)store_.append_audit(id, "state", "paused: " + why);
  emit({id, "state",
        json::serialize(json::object{{"state", "paused"}, {"round", r.current_round}})});
  return Status::Ok();
}

Status ExperimentManager::note_served_from_config(const std::string& id) {
  return store_.append_audit(id, "live", "served from the --config of atoll coordinator");
}

Status ExperimentManager::remove(const std::string& id) {
  if (!valid_id(id)) return NotFound("experiment '" + id + "' does not exist");
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  if (is_live(id))
    return FailedPrecondition("experiment '" + id + "' is the one this coordinator serves (" +
                              experiment_state_name(service_->state()) +
                              ") and cannot be deleted while it is loaded here; stop the "
                              "coordinator first");
  ATOLL_RETURN_IF_ERROR(store_.delete_experiment(id));
  {
    std::lock_guard<std::mutex> totals_lk(totals_mu_);
    settled_totals_.erase(id);  // a new experiment may take the id
  }
  {
    std::lock_guard<std::mutex> fold_lk(fold_mu_);
    folds_.erase(id);
  }
  emit({id, "experiments", json::serialize(json::object{{"id", id}, {"event", "deleted"}})});
  return Status::Ok();
}

StatusOr<std::vector<NodeView>> ExperimentManager::nodes(const std::string& id) const {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  ATOLL_ASSIGN_OR_RETURN(std::vector<NodeRecord> records, store_.list_nodes(id));
  std::map<std::string, NodeView> views;
  for (const auto& r : records) {
    NodeView& v = views[r.node_id];
    v.node_id = r.node_id;
    v.status = r.state;
    v.device = r.device;
    v.budget = r.budget;
    v.joined_unix_ms = r.joined_unix_ms;
    v.last_seen_unix_ms = r.last_seen_unix_ms;
  }
  {
    std::shared_lock<std::shared_mutex> lk(svc_mu_);
    if (is_live(id)) {
      for (const auto& n : service_->nodes()) {
        NodeView& v = views[n.node_id];
        v.node_id = n.node_id;
        v.status = n.status;
        if (!n.device.empty()) v.device = n.device;
        v.loss = n.loss;
        v.last_seen_unix_ms = std::max(v.last_seen_unix_ms, n.last_seen_unix_ms);
        // The last heartbeat of a run that ended says what the node did, not what it does.
        if (s.record.state != ExperimentState::kRunning &&
            s.record.state != ExperimentState::kPaused)
          continue;
        v.has_progress = true;
        v.ready = n.ready;
        v.round = n.round;
        v.inner_step = n.inner_step;
        v.tokens_per_s = n.tokens_per_s;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lk(fold_mu_);
    RecordFold& fold = folds_[id];
    fold_records_locked(id, s, fold);
    for (const auto& [node, t] : fold.totals) {
      auto it = views.find(node);
      if (it == views.end()) continue;
      it->second.rounds = t.rounds;
      it->second.tokens = t.tokens;
      it->second.bytes_up = t.bytes_up;
      it->second.bytes_down = t.bytes_down;
    }
  }
  std::vector<NodeView> out;
  for (auto& [k, v] : views) out.push_back(std::move(v));
  return out;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ExperimentManager::subnets(
    const std::string& id) const {
  ATOLL_RETURN_IF_ERROR(get(id).status());  // NOT_FOUND for an unknown experiment
  std::shared_lock<std::shared_mutex> lk(svc_mu_);
  if (!is_live(id)) return std::vector<std::pair<std::string, std::string>>{};
  return service_->hydra_subnets();  // empty unless the live experiment runs Hydra
}

StatusOr<std::vector<RoundRecord>> ExperimentManager::rounds(const std::string& id, uint64_t from,
                                                             uint64_t limit) const {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  std::vector<RoundRecord> out;
  const uint64_t end = std::min(s.record.current_round, from + std::min<uint64_t>(limit, 100000));
  for (uint64_t r = from; r < end; ++r) {
    auto rec = store_.load_round(id, r);
    if (rec.status().code() == StatusCode::kNotFound) continue;
    if (!rec.ok()) return rec.status();
    out.push_back(std::move(rec).value());
  }
  return out;
}

StatusOr<MetricSeries> ExperimentManager::metrics(const std::string& id,
                                                  uint32_t max_points) const {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  max_points = std::clamp<uint32_t>(max_points, 2, kMaxSeriesPoints);
  MetricSeries m;
  m.total_rounds = s.record.current_round;
  {
    std::lock_guard<std::mutex> lk(fold_mu_);
    RecordFold& fold = folds_[id];
    fold_records_locked(id, s, fold);
    // The dashboard sums "bytes" and "ddp_bytes" as bucket × each point's mean, which is exact
    // when the bucket splits none of the kept points of the per-round series.
    uint64_t stride = 1;
    for (const auto& [name, series] : fold.global) stride = std::max(stride, series.stride());
    const uint64_t wanted = std::max<uint64_t>(1, (m.total_rounds + max_points - 1) / max_points);
    m.bucket = (wanted + stride - 1) / stride * stride;
    for (const auto& [name, series] : fold.global) m.global[name] = series.bucketed(m.bucket);
    for (const auto& [metric, nodes] : fold.per_node)
      for (const auto& [node, series] : nodes) m.per_node[metric][node] = series.bucketed(m.bucket);
    // The nodes' and the coordinator's reports (a few per round).
    ATOLL_RETURN_IF_ERROR(fold_reports_locked(id, fold));
    for (const auto& [name, series] : fold.coordinator_reports)
      m.global[name] = series.bucketed(m.bucket);
    for (const auto& [metric, nodes] : fold.node_reports)
      for (const auto& [node, series] : nodes) m.per_node[metric][node] = series.bucketed(m.bucket);
  }
  return m;
}

Status ExperimentManager::fold_reports_locked(const std::string& id, RecordFold& fold) const {
  ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> reporters, store_.metrics_reporters(id));
  for (const std::string& reporter : reporters) {
    std::string& cursor = fold.report_cursor[reporter];
    ATOLL_ASSIGN_OR_RETURN(auto rows, store_.list_metrics_after(id, reporter, cursor));
    for (const auto& [key, text] : rows) {
      cursor = key;
      const auto report = parse_metrics_report(text);
      if (!report) continue;
      const double r = report->round;
      const std::string& n = report->node;
      for (const auto& kv : report->metrics()) {
        if (!kv.value().is_number()) continue;
        const double val = kv.value().to_number<double>();
        if (n == kCoordinatorNode) {
          fold.coordinator_reports[std::string(kv.key())].add(r, val);
          // x = 0 is the initial parameters': no result of the run, so not its final or best.
          if (kv.key() == "val_bpb" && r != 0) {
            if (r >= fold.final_val_bpb_round)
              fold.final_val_bpb_round = r, fold.final_val_bpb = val;
            if (!fold.best_val_bpb || val < *fold.best_val_bpb) fold.best_val_bpb = val;
          }
        } else if (kv.key() == "tokens_per_s" || kv.key() == "site_val_bpb" ||
                   kv.key() == "teacher_bytes_per_token") {
          // x = rounds completed: a report of round r comes after r + 1 rounds.
          fold.node_reports[std::string(kv.key())][n].add(r + 1, val);
        }
      }
    }
  }
  return Status::Ok();
}

void ExperimentManager::fold_records_locked(const std::string& id, const ExperimentSummary& s,
                                            RecordFold& fold) const {
  const double param_bytes = static_cast<double>(s.record.numel) * 4.0;
  // Inner steps of one round: H, or H/P in Streaming DiLoCo (a round syncs one fragment).
  const double steps = s.config.diloco.steps_per_round();
  for (; fold.rounds < s.record.current_round; ++fold.rounds) {
    auto rec = store_.load_round(id, fold.rounds);
    if (rec.status().code() == StatusCode::kNotFound) continue;
    if (!rec.ok()) break;  // read again at the next request
    const double x = static_cast<double>(fold.rounds + 1);
    double pushed = 0;
    for (const auto& p : rec->participants) {
      RecordFold::NodeTotals& t = fold.totals[p.node_id];
      t.tokens = add_saturating(t.tokens, p.tokens);  // records written before the cap
      t.bytes_up += p.bytes_up;
      t.bytes_down += p.bytes_down;
      if (!p.pushed) continue;
      ++t.rounds;
      pushed += 1;
      fold.per_node["loss"][p.node_id].add(x, p.loss);
      fold.per_node["bytes_up"][p.node_id].add(x, static_cast<double>(p.bytes_up));
    }
    for (const auto& [node, bytes] : rec->late_bytes_down) fold.totals[node].bytes_down += bytes;
    fold.global["mean_loss"].add(x, rec->mean_loss);
    fold.global["tokens"].add(x, static_cast<double>(rec->tokens));
    fold.global["bytes"].add(
        x, static_cast<double>(rec->bytes_up + rec->bytes_down + late_bytes_down_total(*rec)));
    // A ring all-reduce of the fp32 gradient every inner step: 2(N−1)·P·4 bytes in total.
    fold.global["ddp_bytes"].add(x, steps * 2.0 * std::max(0.0, pushed - 1) * param_bytes);
    fold.global["duration_s"].add(x, rec->duration_s);
  }
}

StatusOr<ExperimentTotals> ExperimentManager::totals(const std::string& id) const {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  // A finished or failed experiment's rounds and reports no longer change: computed once.
  const bool settled = s.record.state == ExperimentState::kFinished ||
                       s.record.state == ExperimentState::kFailed;
  if (settled) {
    std::lock_guard<std::mutex> lk(totals_mu_);
    auto it = settled_totals_.find(id);
    if (it != settled_totals_.end() && it->second.first == s.record.current_round)
      return it->second.second;
  }
  ExperimentTotals t;
  if (s.record.current_round > 0) {
    auto first = store_.load_round(id, 0);
    auto last = store_.load_round(id, s.record.current_round - 1);
    if (first.ok())
      t.started_unix_ms = first->committed_unix_ms -
                          std::min<uint64_t>(first->committed_unix_ms,
                                             static_cast<uint64_t>(1000.0 * first->duration_s));
    if (last.ok()) t.last_commit_unix_ms = last->committed_unix_ms;
  }
  {
    // The reports folded so far plus those stored since (each report is read once).
    std::lock_guard<std::mutex> lk(fold_mu_);
    RecordFold& fold = folds_[id];
    ATOLL_RETURN_IF_ERROR(fold_reports_locked(id, fold));
    t.final_val_bpb = fold.final_val_bpb;
    t.best_val_bpb = fold.best_val_bpb;
  }
  if (settled) {
    std::lock_guard<std::mutex> lk(totals_mu_);
    settled_totals_[id] = {s.record.current_round, t};
  }
  return t;
}

StatusOr<std::string> ExperimentManager::checkpoint(const std::string& id,
                                                    std::string* filename) const {
  ATOLL_ASSIGN_OR_RETURN(ExperimentSummary s, get(id));
  if (!options_.encode_checkpoint)
    return FailedPrecondition("this coordinator was started without checkpoint export");
  ATOLL_ASSIGN_OR_RETURN(CommittedState st, store_.load_state(id));
  if (filename)
    *filename = id + "-round" + std::to_string(st.experiment.current_round) + ".safetensors";
  return options_.encode_checkpoint(st.experiment, s.config, st.params);
}

}  // namespace atl::coordinator
