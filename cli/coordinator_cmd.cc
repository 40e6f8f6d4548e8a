// `atoll coordinator --config F --store DIR --listen HOST:PORT --tls DIR`
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/flags.h"
#include "cli/signals.h"
#include "coordinator/http/auth.h"

namespace atl::cli {

void print_event(const coordinator::Event& e) {
  using K = coordinator::Event::Kind;
  switch (e.kind) {
    case K::kRoundCommitted:
      if (e.record) {
        std::printf("round %" PRIu64 " committed | loss %.4f | %" PRIu64 " tokens | up %" PRIu64
                    " B down %" PRIu64 " B | %.1fs | sha256 %s\n",
                    e.round, e.record->mean_loss, e.record->tokens, e.record->bytes_up,
                    e.record->bytes_down, e.record->duration_s,
                    e.record->params_fingerprint.substr(0, 16).c_str());
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

int cmd_coordinator(const Args& args) {
  Flags flags("coordinator",
              {{"config", true, "experiment config (TOML)", ""},
               {"store", true, "RocksDB directory (created if missing; resumed if present)", ""},
               {"listen", true, "HOST:PORT to serve gRPC on", "127.0.0.1:7070"},
               {"tls", true, "TLS directory with ca.crt and the server certificate", ""},
               {"server-name", true, "certificate name of this coordinator", "coordinator"},
               {"insecure", false, "plaintext, no authentication (local development only)", ""},
               {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
                "127.0.0.1:0"},
               {"web", true, "dashboard files (default: web/ of the source tree)", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("coordinator", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  CoordinatorLaunch l;
  auto config = flags.get("config");
  if (!config) return fail("coordinator", "--config FILE is required (see docs/configuration.md)", 2);
  auto cfg = coordinator::load_experiment_config(*config);
  if (!cfg.ok()) return fail("coordinator", cfg.status().message(), 2);
  l.config = *cfg;
  auto store = flags.get("store");
  if (!store) return fail("coordinator", "--store DIR is required (where RocksDB keeps state)", 2);
  l.store_dir = *store;
  l.listen = flags.get_or("listen", "127.0.0.1:7070");
  l.insecure = flags.has("insecure");
  l.tls_dir = flags.get_or("tls", "");
  l.server_name = flags.get_or("server-name", "coordinator");
  if (!l.insecure && l.tls_dir.empty())
    return fail("coordinator", "--tls DIR is required (or --insecure for local development)", 2);
  l.on_event = print_event;
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
  if (rc.http) {
    std::printf("dashboard: %s\n", rc.http->url().c_str());
    // First start of a store: bootstrap one admin token (later ones: `atoll token create`).
    auto tokens = rc.store->list_tokens();
    if (tokens.ok() && tokens->empty()) {
      auto token = coordinator::http::create_token(*rc.store, coordinator::http::Role::kAdmin,
                                                   "bootstrap");
      if (!token.ok()) return fail("coordinator", token.status().message());
      std::printf("token: %s\n", token->c_str());
    }
  }
  std::fflush(stdout);
  if (Status s = rc.service->start(); !s.ok()) return fail("coordinator", s.message());
  const auto* stop = install_stop_signals();
  while (!stop->load()) {
    // The live experiment: the config's, until the dashboard starts another stored one.
    auto live = rc.manager->live();
    if (!live) break;
    auto st = live->wait_until_finished(coordinator::Clock::now() + std::chrono::milliseconds(200));
    if (st.ok() && live == rc.manager->live()) {
      // Let nodes collect their STOP task before the server goes away.
      std::this_thread::sleep_for(std::chrono::seconds(2));
      if (live != rc.manager->live()) continue;  // the dashboard started another experiment
      std::printf("experiment %s: %s at round %" PRIu64 ", sha256 %s\n",
                  live->experiment_id().c_str(), coordinator::experiment_state_name(*st),
                  live->current_round(), live->params_fingerprint().c_str());
      return *st == coordinator::ExperimentState::kFinished ? 0 : 1;
    }
  }
  std::printf("coordinator: stopping (state is in %s; start again to resume)\n",
              l.store_dir.c_str());
  return 0;
}

}  // namespace atl::cli
