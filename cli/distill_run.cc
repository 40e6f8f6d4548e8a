#include "cli/distill_run.h"

#include <boost/json.hpp>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/demo_sites.h"
#include "cli/event_queue.h"
#include "cli/global_eval.h"
#include "cli/port_file.h"
#include "cli/progress.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/peft_export.h"
#include "node/subprocess.h"
#include "node/teacher_service.h"
#include "transport/tls/credentials.h"

namespace atl::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The teacher's link: what a student node is told with --teacher, and its certificate name.
constexpr const char* kTeacherName = "teacher";
constexpr double kTeacherWaitS = 60;

// What one run of the students (with or without the teacher) adds up.
struct RunResult {
  double initial_bpb = NAN, final_bpb = NAN;
  uint64_t rounds = 0, bytes_up = 0, bytes_down = 0;
  double teacher_bytes_per_token = 0;  // mean over the sites of their last reported value
  double wall_s = 0;
  std::string final_fingerprint;  // θ of the last committed round
  // The last run's coordinator while its dashboard serves on after the summary (--http).
  std::shared_ptr<RunningCoordinator> serving;
};

// What every run of the students shares.
struct DistillRun {
  DistillRun(const DistillExperiment& experiment, SiteMode site_mode)
      : d(experiment), mode(site_mode) {}
  const DistillExperiment& d;
  const SiteMode mode;
  std::string run_dir, tls_dir;
  std::unique_ptr<GlobalEvaluator> evaluator;  // the students' θ
  const std::atomic<bool>* stop = nullptr;
  bool in_process() const { return mode == SiteMode::kInProcess; }
};

// ---- the teacher ---------------------------------------------------------------------------

// Trains the teacher with `atoll train` on all of Brown; returns its checkpoint.
StatusOr<std::string> train_teacher(const DistillRun& run) {
  const DistillExperiment& d = run.d;
  const auto& t = d.teacher;
  std::printf("teacher: training dim %" PRId64 " x %" PRId64 " layers for %" PRId64
              " steps on all of Brown ...\n",
              t.dim, t.layers, d.teacher_steps);
  std::fflush(stdout);
  const std::string log = run.run_dir + "/teacher-train.log";
  auto s = [](int64_t v) { return std::to_string(v); };
  ATOLL_ASSIGN_OR_RETURN(node::Subprocess p,
                         node::Subprocess::spawn({node::self_executable(),
                                                  "train",
                                                  "--data",
                                                  "brown",
                                                  "--brown-dir",
                                                  d.brown_dir,
                                                  "--tokenizer",
                                                  "bytes",
                                                  "--dim",
                                                  s(t.dim),
                                                  "--layers",
                                                  s(t.layers),
                                                  "--heads",
                                                  s(t.heads),
                                                  "--ffn",
                                                  s(t.ffn),
                                                  "--seq",
                                                  s(d.config.model.seq_len),
                                                  "--batch",
                                                  s(d.config.train.batch_size),
                                                  "--steps",
                                                  s(d.teacher_steps),
                                                  "--seed",
                                                  s(static_cast<int64_t>(d.config.seed)),
                                                  "--eval-tokens",
                                                  s(d.eval_tokens),
                                                  "--threads",
                                                  s(d.threads),
                                                  "--out",
                                                  run.run_dir + "/teacher"},
                                                 log));
  std::optional<int> code;
  while (!(code = p.wait_for(std::chrono::milliseconds(200))))
    if (run.stop->load()) {
      p.signal(SIGTERM);
      return Unavailable("interrupted");
    }
  if (*code != 0) return Internal("teacher training failed (see " + log + ")");
  return run.run_dir + "/teacher/checkpoint.safetensors";
}

// Validation bpb of the checkpoint on Brown's held-out documents: what `atoll train` reports
// after its last step, with the same batch and token budget.
StatusOr<double> teacher_bpb(const DistillRun& run, const std::string& checkpoint) {
  ATOLL_ASSIGN_OR_RETURN(node::LoadedCheckpoint loaded, node::load_checkpoint(checkpoint));
  ATOLL_ASSIGN_OR_RETURN(node::LoadedCheckpoint ck, node::merged_if_lora(std::move(loaded)));
  GlobalEvalOptions eo;
  eo.data_spec = "brown";
  eo.brown_dir = run.d.brown_dir;
  eo.batch = static_cast<int>(run.d.config.train.batch_size);
  eo.max_tokens = run.d.eval_tokens;
  eo.tokenizer_blob = ck.meta.tokenizer;  // bytes for a teacher trained here
  ATOLL_ASSIGN_OR_RETURN(auto evaluator, GlobalEvaluator::create(ck.meta.model, eo));
  return evaluator->bpb(ck.params);
}

// The teacher serving its whole vocabulary over mTLS with the run's "teacher" certificate:
// an `atoll node --role teacher` process, or a TeacherService in this process.
class ServedTeacher {
 public:
  static StatusOr<std::unique_ptr<ServedTeacher>> start(const DistillRun& run,
                                                        const std::string& checkpoint) {
    std::unique_ptr<ServedTeacher> t(new ServedTeacher());
    if (run.in_process()) {
      ATOLL_RETURN_IF_ERROR(t->serve_here(run, checkpoint));
    } else {
      ATOLL_RETURN_IF_ERROR(t->spawn(run, checkpoint));
    }
    return t;
  }
  ~ServedTeacher() { stop(); }
  const std::string& address() const { return address_; }
  void stop() {
    if (server_) server_->shutdown();
    server_.reset();
    if (process_.pid() > 0 && process_.running()) {
      process_.signal(SIGTERM);
      (void)process_.wait_for(std::chrono::seconds(10));
    }
  }

 private:
  ServedTeacher() = default;

  Status spawn(const DistillRun& run, const std::string& checkpoint) {
    const std::string log = run.run_dir + "/teacher-serve.log";
    const std::string port_file = run.run_dir + "/teacher.port";
    std::error_code ec;
    std::filesystem::remove(port_file, ec);  // a rerun on the same --store
    ATOLL_ASSIGN_OR_RETURN(
        process_,
        node::Subprocess::spawn(
            {node::self_executable(), "node", "--role", "teacher", "--checkpoint", checkpoint,
             "--listen", "127.0.0.1:0", "--port-file", port_file, "--tls", run.tls_dir, "--data",
             "brown", "--brown-dir", run.d.brown_dir, "--threads", std::to_string(run.d.threads)},
            log));
    auto address = wait_for_port_file(port_file, std::chrono::seconds(120),
                                      [&]() -> std::optional<std::string> {
                                        if (process_.running()) return std::nullopt;
                                        return "the teacher node exited (see " + log + ")";
                                      });
    if (!address.ok())
      return Unavailable("the teacher node did not start: " + address.status().message());
    address_ = *address;
    return Status::Ok();
  }

  Status serve_here(const DistillRun& run, const std::string& checkpoint) {
    ATOLL_ASSIGN_OR_RETURN(node::LoadedCheckpoint loaded, node::load_checkpoint(checkpoint));
    ATOLL_ASSIGN_OR_RETURN(node::LoadedCheckpoint ck, node::merged_if_lora(std::move(loaded)));
    ATOLL_ASSIGN_OR_RETURN(const node::DataSpec data, node::parse_data_spec("brown"));
    ATOLL_ASSIGN_OR_RETURN(node::TeacherServiceOptions o,
                           node::teacher_service_options(std::move(ck), data, run.d.brown_dir, 0, 1,
                                                         /*require_tls_identity=*/true));
    ATOLL_ASSIGN_OR_RETURN(auto creds, transport::server_credentials(run.tls_dir, kTeacherName));
    service_ = std::make_unique<node::TeacherService>(std::move(o));
    ATOLL_ASSIGN_OR_RETURN(server_, node::TeacherServer::start(*service_, "127.0.0.1:0", creds));
    address_ = server_->address();
    return Status::Ok();
  }

  std::string address_;
  node::Subprocess process_;                       // the demo's teacher process, or
  std::unique_ptr<node::TeacherService> service_;  // the simulation's teacher
  std::unique_ptr<node::TeacherServer> server_;
};

// ---- the students -------------------------------------------------------------------------

// What each student site gets from `atoll node --teacher ADDRESS --codec ... --alpha ... --tau
// ... --teacher-wait 60`.
node::DistillNodeOptions student_options(const DistillExperiment& d, const std::string& teacher) {
  node::DistillNodeOptions o;
  o.teachers = {teacher};
  o.server_name = kTeacherName;
  o.codec = d.codec;
  o.alpha = d.alpha;
  o.tau = d.tau;
  o.wait_s = kTeacherWaitS;
  return o;
}

std::vector<std::string> student_argv(const node::DistillNodeOptions& o) {
  char a[32], t[32], w[32];
  std::snprintf(a, sizeof a, "%.17g", o.alpha);  // exact: the node parses the same double
  std::snprintf(t, sizeof t, "%.17g", o.tau);
  std::snprintf(w, sizeof w, "%.17g", o.wait_s);
  return {"--teacher", o.teachers.at(0), "--codec", o.codec,          "--alpha",
          a,           "--tau",          t,         "--teacher-wait", w};
}

// The student sites of run `label` ("distill", "baseline"), logging to <run
// dir>/<label>-<name>.log; they distill from `teacher` unless it is empty.
StatusOr<std::unique_ptr<DemoSites>> start_students(const DistillRun& run, RunningCoordinator& rc,
                                                    const std::string& label,
                                                    const std::string& teacher) {
  const DistillExperiment& d = run.d;
  std::vector<SiteSpec> specs;
  for (size_t i = 0; i < d.site_names.size(); ++i)
    specs.push_back({d.site_names[i], d.site_data[i]});
  if (run.in_process()) {
    VirtualSitesOptions o;
    o.brown_dir = d.brown_dir;
    o.log_dir = run.run_dir;
    o.log_prefix = label + "-";
    o.metrics = rc.metrics.get();
    if (!teacher.empty()) {
      o.distill = student_options(d, teacher);
      o.teacher_tls_dir = run.tls_dir;
    }
    return start_virtual_sites(rc.service->engine(), specs, o);
  }
  NodeProcessOptions o;
  o.coordinator = rc.server->address();
  o.tls_dir = run.tls_dir;
  o.threads = static_cast<int>(d.threads);
  o.brown_dir = d.brown_dir;
  o.log_dir = run.run_dir;
  o.log_prefix = label + "-";
  if (!teacher.empty()) o.extra_args = student_argv(student_options(d, teacher));
  return start_node_processes(specs, o);
}

// Mean over the sites of the last "teacher_bytes_per_token" each reported with its rounds
// (cumulative over its steps), as the store keeps the sites' metrics; 0 when none reported.
StatusOr<double> teacher_bytes_per_token(const coordinator::Store& store,
                                         const std::string& experiment_id) {
  ATOLL_ASSIGN_OR_RETURN(const std::vector<std::string> reports, store.list_metrics(experiment_id));
  std::map<std::string, std::pair<uint64_t, double>> last;  // node -> (round, value)
  for (const std::string& text : reports) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(text, ec);
    if (ec || !v.is_object()) return DataLoss("the store holds a metrics report that is not JSON");
    const auto& o = v.as_object();
    const auto* metrics = o.if_contains("metrics");
    const auto* node = o.if_contains("node");
    const auto* round = o.if_contains("round");
    if (!metrics || !metrics->is_object() || !node || !node->is_string() || !round) continue;
    const auto* value = metrics->as_object().if_contains("teacher_bytes_per_token");
    if (!value) continue;
    const uint64_t r = round->to_number<uint64_t>();
    auto& slot = last[std::string(node->as_string())];
    if (r >= slot.first) slot = {r, value->to_number<double>()};
  }
  double sum = 0;
  for (const auto& [node, rv] : last) sum += rv.second;
  return last.empty() ? 0.0 : sum / static_cast<double>(last.size());
}

// Follows the coordinator's events until the experiment finishes, one line per round.
Status watch_students(const DistillRun& run, RunningCoordinator& rc, EventQueue& events,
                      DemoSites& sites, const std::string& label, RunResult& res) {
  const uint64_t R = run.d.config.diloco.rounds;
  for (;;) {
    if (run.stop->load()) return Unavailable("interrupted");
    if (auto failure = sites.failure()) return Internal(*failure);
    auto e = events.pop(std::chrono::milliseconds(200));
    if (!e) continue;
    using K = coordinator::Event::Kind;
    if (e->kind == K::kRoundCommitted && e->record) {
      const auto& rec = *e->record;
      res.bytes_up += rec.bytes_up;
      res.bytes_down += rec.bytes_down;
      ++res.rounds;
      if (auto v = run.evaluator->evaluate_and_publish(rc, rc.service->experiment_id(),
                                                       rec.round + 1, e->params.get());
          v.ok())
        res.final_bpb = *v;
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
      return Status::Ok();
    } else if (e->kind == K::kFailed) {
      return Internal("experiment failed: " + e->message);
    } else if (e->kind == K::kUpdateRejected || e->kind == K::kNodeLost ||
               e->kind == K::kRoundRestarted) {
      std::printf("[%s] %s %s: %s\n", label.c_str(), coordinator::event_kind_name(e->kind),
                  e->node_id.c_str(), e->message.c_str());
    }
  }
}

// One DiLoCo experiment over the student sites, distilling from `teacher` (empty: the baseline
// without distillation). With a dashboard (--http), the `last` run's coordinator is kept in
// `serving` so that its dashboard can go on after the summary.
StatusOr<RunResult> run_students(const DistillRun& run, const std::string& label,
                                 const std::string& teacher, bool last) {
  RunResult res;
  EventQueue events;
  CoordinatorLaunch launch;
  launch.config = run.d.config;
  launch.config.name = "demo-distill-" + label;
  launch.store_dir = run.run_dir + "/store-" + label;
  launch.tls_dir = run.tls_dir;
  if (run.in_process()) launch.listen = "";  // no gRPC: the sites are threads
  launch.on_event = [&events](const coordinator::Event& e) { events.push(e); };
  if (run.d.http != "off" && !run.d.http.empty()) launch.http_listen = run.d.http;
  ATOLL_ASSIGN_OR_RETURN(auto running, launch_coordinator(launch));
  RunningCoordinator& rc = *running;
  if (rc.http) ATOLL_RETURN_IF_ERROR(announce_dashboard(rc, "demo-distill-" + label, true));
  ATOLL_ASSIGN_OR_RETURN(res.initial_bpb,
                         run.evaluator->evaluate_and_publish(rc, rc.service->experiment_id(),
                                                             rc.service->current_round()));
  std::printf("[%s] coordinator %s | round   0 | val bpb %.4f (initial)\n", label.c_str(),
              rc.server ? rc.server->address().c_str() : "in-process", res.initial_bpb);
  std::fflush(stdout);
  // Declared after the coordinator: in-process sites call its engine until they are gone.
  ATOLL_ASSIGN_OR_RETURN(std::unique_ptr<DemoSites> sites, start_students(run, rc, label, teacher));
  ATOLL_RETURN_IF_ERROR(rc.service->start());
  const auto t0 = Clock::now();
  ATOLL_RETURN_IF_ERROR(watch_students(run, rc, events, *sites, label, res));
  res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  sites->finish();  // every site has reported its last round once it has left
  res.final_fingerprint = rc.service->params_fingerprint();
  ATOLL_ASSIGN_OR_RETURN(res.teacher_bytes_per_token,
                         teacher_bytes_per_token(*rc.store, rc.service->experiment_id()));
  if (last && rc.http) res.serving = std::move(running);
  return res;
}

// ---- the summary ----------------------------------------------------------------------------

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

void print_summary(const DistillRun& run, const RunResult& r, const std::optional<RunResult>& base,
                   double teacher_val_bpb, double total_s) {
  const DistillExperiment& d = run.d;
  std::printf("\nsummary: %zu sites, %" PRIu64
              " rounds x %u inner steps, DiLoCo + distillation, %s\n",
              d.site_names.size(), r.rounds, d.config.diloco.inner_steps,
              run.in_process() ? "in-process students, teacher over TLS 1.3 mTLS" : "TLS 1.3 mTLS");
  if (std::isfinite(teacher_val_bpb)) std::printf("  teacher val bpb    %.4f\n", teacher_val_bpb);
  std::printf("  student val bpb    %.4f -> %.4f\n", r.initial_bpb, r.final_bpb);
  if (base)
    std::printf("  no distillation    %.4f (same sites, steps and init; distillation %+.2f%%)\n",
                base->final_bpb, 100.0 * (r.final_bpb - base->final_bpb) / base->final_bpb);
  std::printf("  teacher link       %.1f bytes/token (%s)\n", r.teacher_bytes_per_token,
              d.codec.c_str());
  std::printf("  DiLoCo syncs       up %s, down %s\n",
              format_bytes(static_cast<double>(r.bytes_up)).c_str(),
              format_bytes(static_cast<double>(r.bytes_down)).c_str());
  std::printf("  wall time          %s (students %s)\n", format_duration(total_s).c_str(),
              format_duration(r.wall_s).c_str());
  std::printf("  final sha256       %s\n", r.final_fingerprint.c_str());
}

Status write_summary_json(const DistillRun& run, const RunResult& r,
                          const std::optional<RunResult>& base, double teacher_val_bpb,
                          double total_s, const std::string& path) {
  const DistillExperiment& d = run.d;
  std::ofstream out(path);
  out << "{\"algorithm\":\"distill\",\"sites\":" << d.site_names.size()
      << ",\"rounds\":" << r.rounds << ",\"inner_steps\":" << d.config.diloco.inner_steps
      << ",\"codec\":\"" << d.codec << "\",\"alpha\":" << json_number(d.alpha)
      << ",\"tau\":" << json_number(d.tau)
      << ",\"teacher_val_bpb\":" << json_number(teacher_val_bpb)
      << ",\"initial_val_bpb\":" << json_number(r.initial_bpb)
      << ",\"final_val_bpb\":" << json_number(r.final_bpb);
  if (base) out << ",\"baseline_val_bpb\":" << json_number(base->final_bpb);
  out << ",\"teacher_bytes_per_token\":" << json_number(r.teacher_bytes_per_token)
      << ",\"bytes_up\":" << r.bytes_up << ",\"bytes_down\":"
      << r.bytes_down
      // tls: the students' link to the coordinator; the teacher's is TLS either way.
      << ",\"tls\":" << (run.in_process() ? "false" : "true") << ",\"teacher_tls\":true"
      << ",\"site_mode\":\"" << (run.in_process() ? "in-process" : "processes")
      << "\",\"final_fingerprint\":\"" << r.final_fingerprint
      << "\",\"wall_s\":" << json_number(total_s) << "}\n";
  if (!out) return IoError("cannot write --summary-json " + path);
  return Status::Ok();
}

// Run directory and dev CA: the coordinator and the teacher are servers, the sites clients of
// both (in-process sites still reach the teacher over mTLS).
std::optional<int> prepare(const std::string& cmd, DistillRun& run) {
  const DistillExperiment& d = run.d;
  auto run_dir = demo_run_dir(d.store, "atoll-" + cmd);
  if (!run_dir.ok()) return fail(cmd, run_dir.status().message());
  run.run_dir = *run_dir;
  run.tls_dir = run.run_dir + "/tls";
  if (Status s = provision_dev_ca(run.tls_dir, {"coordinator", kTeacherName}, d.site_names);
      !s.ok())
    return fail(cmd, s.message());
  std::printf(
      "atoll %s --algorithm distill: %zu sites, %u rounds x %u inner steps, alpha %.2f "
      "tau %.2f, codec %s, %s, run dir %s\n",
      cmd.c_str(), d.site_names.size(), d.config.diloco.rounds, d.config.diloco.inner_steps,
      d.alpha, d.tau, d.codec.c_str(),
      run.in_process() ? "in-process students, teacher over TLS 1.3 mTLS" : "TLS 1.3 mTLS",
      run.run_dir.c_str());
  std::fflush(stdout);
  run.stop = install_stop_signals();
  return std::nullopt;
}

}  // namespace

int run_distill_experiment(const std::string& cmd, const DistillExperiment& d, SiteMode mode) {
  DistillRun run(d, mode);
  if (auto code = prepare(cmd, run)) return *code;
  const auto t_start = Clock::now();
  std::string checkpoint = d.teacher_checkpoint.value_or("");
  if (checkpoint.empty()) {
    auto trained = train_teacher(run);
    if (!trained.ok())
      return run.stop->load() ? stopped_exit_code() : fail(cmd, trained.status().message());
    checkpoint = *trained;
  }
  // The teacher's bpb, trained here or given (a given one was reported as null).
  kernels::cpu::set_num_threads(static_cast<int>(d.threads));  // as `atoll train` evaluated
  auto bpb = teacher_bpb(run, checkpoint);
  if (!bpb.ok()) return fail(cmd, bpb.status().message());
  const double teacher_val_bpb = *bpb;
  // One process per site uses one thread here; in-process sites share this process's setting.
  kernels::cpu::set_num_threads(run.in_process() ? static_cast<int>(d.threads) : 1);
  auto teacher = ServedTeacher::start(run, checkpoint);
  if (!teacher.ok()) return fail(cmd, teacher.status().message());
  std::printf("teacher: %s serving on %s", checkpoint.c_str(), (*teacher)->address().c_str());
  if (std::isfinite(teacher_val_bpb)) std::printf(" (val bpb %.4f)", teacher_val_bpb);
  std::printf("\n");
  for (size_t i = 0; i < d.site_names.size(); ++i)
    std::printf("  %s: %s\n", d.site_names[i].c_str(), d.site_data[i].c_str());
  std::fflush(stdout);

  GlobalEvalOptions eo;
  eo.brown_dir = d.brown_dir;
  eo.batch = static_cast<int>(d.config.train.batch_size);
  eo.max_tokens = d.eval_tokens;
  auto evaluator = GlobalEvaluator::create(model_config_of(d.config), eo);
  if (!evaluator.ok()) return fail(cmd, evaluator.status().message());
  run.evaluator = std::move(evaluator).value();
  auto distilled = run_students(run, "distill", (*teacher)->address(), !d.baseline);
  (*teacher)->stop();
  if (!distilled.ok()) return fail(cmd, distilled.status().message());
  std::optional<RunResult> base;
  if (d.baseline) {
    auto b = run_students(run, "baseline", "", true);
    if (!b.ok()) return fail(cmd, b.status().message());
    base = *b;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  print_summary(run, *distilled, base, teacher_val_bpb, total_s);
  if (d.summary_json)
    if (Status s =
            write_summary_json(run, *distilled, base, teacher_val_bpb, total_s, *d.summary_json);
        !s.ok())
      return fail(cmd, s.message());
  const auto& serving = base ? base->serving : distilled->serving;
  if (serving) serve_after_done(serving->http.get(), d.after, run.stop);
  return 0;
}

}  // namespace atl::cli
