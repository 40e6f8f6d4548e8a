// `atoll train`: single-site training with progress, validation in bits per byte, safetensors
// checkpoints and a bitwise-exact --resume.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/data/dataset.h"
#include "algorithms/optim/inner_trainer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/progress.h"
#include "cli/signals.h"
#include "cli/train_setup.h"
#include "coordinator/experiment_config.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/evaluate.h"
#include "node/site_data.h"
#include "simulate/train_on_data.h"

namespace atl::cli {

namespace {

using algorithms::InnerTrainer;
using algorithms::ParamSet;

std::vector<FlagSpec> train_flags() {
  auto f = common_model_flags();
  f.push_back({"steps", true, "optimizer steps to run in total", "200"});
  f.push_back({"log-every", true, "print progress every N steps", "10"});
  f.push_back({"eval-every", true, "validation every N steps (0 = only at the end)", "100"});
  f.push_back({"eval-tokens", true, "validation tokens per evaluation (0 = all)", "65536"});
  f.push_back({"checkpoint-every", true, "write a checkpoint every N steps (0 = at the end)", "0"});
  f.push_back({"out", true, "directory for checkpoints (checkpoint.safetensors)", "runs/train"});
  f.push_back({"resume", true, "continue bitwise-exactly from this checkpoint", ""});
  f.push_back({"stop-after", true,
               "stop (with a checkpoint) once this step is reached; --resume continues", "0"});
  f.push_back({"sample", true, "after training, print N sampled tokens of text", "0"});
  f.push_back({"base", true,
               "fine-tune this checkpoint (its model and tokenizer; all of it, or LoRA adapters "
               "with --lora-rank)",
               ""});
  f.push_back({"lora-rank", true, "LoRA rank r: train only adapters over the frozen --base", "0"});
  f.push_back({"lora-alpha", true, "LoRA alpha (the update is scaled by alpha / r)", "16"});
  f.push_back(
      {"lora-targets", true, "projections with adapters: any of q,k,v,o,gate,up,down", "q,k,v,o"});
  return f;
}

// The parameters of a run: the model (with LoRA, the frozen base) and, with LoRA, the adapters
// that train. trained() is what the trainer steps, evaluates and samples with.
struct RunParams {
  std::shared_ptr<ParamSet> model;
  ParamSet adapters;
  algorithms::LoraConfig lora;
  ParamSet& trained() { return algorithms::lora_enabled(lora) ? adapters : *model; }
};

// --lora-* flags -> a LoRA config (rank 0 without --lora-rank), or one line on a bad value.
StatusOr<algorithms::LoraConfig> lora_from_flags(const Flags& flags) {
  algorithms::LoraConfig lora;
  ATOLL_ASSIGN_OR_RETURN(int64_t rank, flags.get_int("lora-rank", 0, 0, 4096));
  ATOLL_ASSIGN_OR_RETURN(lora.alpha,
                         flags.get_double("lora-alpha", 16.0, 0, 1e9, /*min_open=*/true));
  auto targets = algorithms::parse_lora_targets(flags.get_or("lora-targets", "q,k,v,o"));
  if (!targets.ok()) return InvalidArgument("--lora-targets: " + targets.status().message());
  lora.rank = static_cast<int>(rank);
  lora.targets = *targets;
  if (rank == 0) {
    for (const char* f : {"lora-alpha", "lora-targets"})
      if (flags.has(f)) return InvalidArgument(std::string("--") + f + " needs --lora-rank R");
    return lora;
  }
  if (!flags.has("base"))
    return InvalidArgument("--lora-rank needs --base CKPT: adapters fine-tune a trained model");
  return lora;
}

// Fills rp and the trainer's optimizer from a resumed checkpoint, a --base checkpoint or a fresh
// init; returns the first step to run.
StatusOr<int64_t> start_params(const TrainSetup& setup, node::LoadedCheckpoint* resumed,
                               node::LoadedCheckpoint* base, const std::string& resume_path,
                               InnerTrainer& trainer, RunParams& rp) {
  rp.model = std::make_shared<ParamSet>(algorithms::make_layout(setup.model));
  if (resumed) {
    *rp.model = std::move(resumed->params);
    rp.lora = resumed->meta.lora;
    rp.adapters = std::move(resumed->adapters);
    if (algorithms::lora_enabled(rp.lora)) trainer.attach_lora(rp.lora, rp.model);
    if (!resumed->has_optimizer)
      return InvalidArgument("cannot resume from " + resume_path +
                             ": it has no optimizer state (it is a model-only checkpoint)");
    trainer.optimizer().m() = std::move(resumed->m);
    trainer.optimizer().v() = std::move(resumed->v);
    trainer.optimizer().set_step_count(resumed->optimizer_step);
    return resumed->meta.step;
  }
  if (!base) {
    algorithms::init_params(*rp.model, setup.model, setup.seed);
    return 0;
  }
  if (algorithms::lora_enabled(base->meta.lora))
    return InvalidArgument(
        "--base is a LoRA checkpoint; merge it first (atoll export hf "
        "--merge-lora, then atoll import hf) or --resume it");
  *rp.model = std::move(base->params);
  if (algorithms::lora_enabled(rp.lora)) {
    ATOLL_RETURN_IF_ERROR(algorithms::validate(rp.lora, setup.model));
    rp.adapters = ParamSet(algorithms::make_lora_layout(rp.lora, setup.model));
    algorithms::init_lora_params(rp.adapters, rp.lora, setup.model, setup.seed);
    trainer.attach_lora(rp.lora, rp.model);
  }
  return 0;
}

node::Evaluation validation(InnerTrainer& trainer, const ParamSet& params, const TrainSetup& setup,
                            int64_t eval_tokens) {
  return node::evaluate_bpb(trainer.model(), params, setup.site.validation, *setup.site.tokenizer,
                            setup.trainer.seq, setup.trainer.batch, eval_tokens);
}

// The progress line every --log-every steps (mean loss, learning rate, gradient norm, tokens/s
// and ETA over the window since the last line) and the batch's fingerprint.
class StepProgress {
 public:
  StepProgress(int64_t first_step, int64_t total_steps, int64_t log_every)
      : first_(first_step), total_(total_steps), every_(log_every) {}

  void add(const simulate::TrainedStep& t, bool last) {
    const algorithms::StepStats& st = *t.stats;
    window_tokens_ += st.tokens;
    window_loss_ += st.loss;
    window_balance_ += st.router_balance;
    window_z_ += st.router_z;
    ++window_steps_;
    const int64_t done = t.step + 1;
    if (done % every_ != 0 && !last) return;
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - window_start_).count();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta =
        (elapsed / static_cast<double>(done - first_)) * static_cast<double>(total_ - done);
    // MoE: the router's health over the window (balance 1 = even load over the experts).
    char router[96] = "";
    if (window_balance_ > 0)
      std::snprintf(router, sizeof(router), " | router balance %.3f z %.3f",
                    window_balance_ / window_steps_, window_z_ / window_steps_);
    std::printf("step %6" PRId64 "/%" PRId64
                " | loss %.4f | lr %.2e | grad %.3f%s | %s tok/s | "
                "ETA %s\n",
                done, total_, window_loss_ / window_steps_, st.lr, st.grad_norm, router,
                format_count(dt > 0 ? window_tokens_ / dt : 0).c_str(),
                format_duration(eta).c_str());
    std::printf("batch %" PRId64 " sha256 %s\n", t.step,
                algorithms::data::batch_sha256(*t.batch).substr(0, 16).c_str());
    std::fflush(stdout);
    window_start_ = now;
    window_tokens_ = 0;
    window_loss_ = 0;
    window_balance_ = 0;
    window_z_ = 0;
    window_steps_ = 0;
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t first_, total_, every_;
  Clock::time_point start_ = Clock::now(), window_start_ = start_;
  int64_t window_tokens_ = 0;
  double window_loss_ = 0;
  double window_balance_ = 0, window_z_ = 0;  // MoE router losses summed over the window
  int window_steps_ = 0;
};

// The length of the learning-rate schedule: --steps; without --steps, a resumed run keeps the
// schedule length it was started with (the schedule depends on it), so it ends bitwise equal to
// the uninterrupted run.
StatusOr<int64_t> schedule_length(const Flags& flags, int64_t steps,
                                  const node::LoadedCheckpoint* resumed) {
  if (!resumed || flags.has("steps")) return steps;
  const auto it = resumed->meta.extra.find("total_steps");
  if (it == resumed->meta.extra.end()) return steps;
  char* end = nullptr;
  const int64_t total_steps = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || total_steps < 1)
    return InvalidArgument("cannot resume: the checkpoint's total_steps '" + it->second +
                           "' is not a step count (pass --steps N)");
  return total_steps;
}

}  // namespace

// What the run trains: the LoRA line, then the model, data, tokenizer and schedule (resumed_at:
// the step a resumed run starts at).
void print_train_banner(const TrainSetup& setup, RunParams& rp, int64_t total_steps,
                        std::optional<int64_t> resumed_at) {
  const ParamSet& params = rp.trained();
  if (algorithms::lora_enabled(rp.lora))
    std::printf("LoRA r=%d alpha=%g on %s: %s trainable of %s (base frozen)\n", rp.lora.rank,
                rp.lora.alpha, algorithms::lora_targets_csv(rp.lora).c_str(),
                format_count(static_cast<double>(params.numel())).c_str(),
                format_count(static_cast<double>(rp.model->numel())).c_str());
  // The recipe a run's numbers belong to: the precision, and the experts when there are any.
  const algorithms::ModelConfig& m = setup.model;
  std::string recipe = m.moe_experts > 0 ? ", MoE E=" + std::to_string(m.moe_experts) +
                                               " K=" + std::to_string(m.moe_top_k) + " every " +
                                               std::to_string(m.moe_every) + " layer(s)"
                                         : "";
  // nvfp4 keeps its last blocks in bf16: on a shallow model that can be all of them.
  if (setup.trainer.precision == algorithms::Precision::kNvfp4) {
    const int tail = algorithms::nvfp4_bf16_tail_layers(m.layers);
    recipe = (tail >= m.layers ? " (every block in bf16 at " + std::to_string(m.layers) +
                                     " layer(s): this trains as bf16)"
                               : " (last " + std::to_string(tail) + " of " +
                                     std::to_string(m.layers) + " blocks in bf16)") +
             recipe;
  }
  std::printf(
      "atoll train: %s params, data %s (%s train / %s val tokens), tokenizer %s, "
      "B=%d T=%d, %s%s, steps %" PRId64 "%s\n",
      format_count(static_cast<double>(params.numel())).c_str(), setup.data_spec.c_str(),
      format_count(static_cast<double>(setup.site.train.size())).c_str(),
      format_count(static_cast<double>(setup.site.validation.size())).c_str(),
      setup.tokenizer_name.c_str(), setup.trainer.batch, setup.trainer.seq,
      algorithms::precision_name(setup.trainer.precision), recipe.c_str(), total_steps,
      resumed_at ? (" (resuming at step " + std::to_string(*resumed_at) + ")").c_str() : "");
  std::fflush(stdout);
}

namespace {

// "<how> after step S of T: continue with atoll train ... --resume CKPT": the same settings again
// (the checkpoint fixes the model, seed and tokenizer, not the batch, learning rate or data).
void print_resume_line(const char* how, int64_t step, int64_t total_steps, const Flags& flags,
                       const std::string& ckpt_path) {
  const std::string again = flags.retyped({"stop-after", "resume", "tokenizer", "base", "seed"});
  std::printf("%s after step %" PRId64 " of %" PRId64
              ": continue with atoll train%s%s --resume %s\n",
              how, step, total_steps, again.empty() ? "" : " ", again.c_str(), ckpt_path.c_str());
  std::fflush(stdout);
}

// --stop-after N (0: none) on a run of steps (start, total_steps]: past the last step, or at or
// before the step a resumed checkpoint is at, it would stop nowhere.
Status check_stop_after(int64_t stop_after, int64_t start, int64_t total_steps) {
  if (stop_after > total_steps)
    return InvalidArgument("--stop-after " + std::to_string(stop_after) +
                           " is past the run's last step " + std::to_string(total_steps) +
                           " (lower it, or raise --steps)");
  if (stop_after > 0 && stop_after <= start)
    return InvalidArgument("--stop-after " + std::to_string(stop_after) +
                           " is not after the checkpoint's step " + std::to_string(start) +
                           " (raise it, or drop it to run to step " + std::to_string(total_steps) +
                           ")");
  return Status::Ok();
}

}  // namespace

int cmd_train(const Args& args) {
  Flags flags("train", train_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("train", s.message(), 2);
  if (flags.help_requested()) {
    std::printf("%s", flags.usage().c_str());
    return 0;
  }
  auto steps = flags.get_int("steps", 200, 1, int64_t{1} << 40);
  auto log_every = flags.get_int("log-every", 10, 1, int64_t{1} << 40);
  auto eval_every = flags.get_int("eval-every", 100, 0, int64_t{1} << 40);
  auto eval_tokens = flags.get_int("eval-tokens", 65536, 0, int64_t{1} << 40);
  auto ckpt_every = flags.get_int("checkpoint-every", 0, 0, int64_t{1} << 40);
  auto sample_n = flags.get_int("sample", 0, 0, 1 << 20);
  auto stop_after = flags.get_int("stop-after", 0, 0, int64_t{1} << 40);
  for (const auto* r :
       {&stop_after, &steps, &log_every, &eval_every, &eval_tokens, &ckpt_every, &sample_n})
    if (!r->ok()) return fail("train", r->status().message(), 2);

  // Resume: the checkpoint's model, seed and tokenizer win; flags may only extend the run.
  std::optional<node::LoadedCheckpoint> resumed;
  if (auto path = flags.get("resume")) {
    auto ck = node::load_checkpoint(*path);
    if (!ck.ok()) return fail("train", "cannot resume: " + ck.status().message());
    resumed = std::move(ck).value();
  }
  auto total_steps_or = schedule_length(flags, *steps, resumed ? &*resumed : nullptr);
  if (!total_steps_or.ok()) return fail("train", total_steps_or.status().message(), 2);
  const int64_t total_steps = *total_steps_or;
  if (Status s = check_stop_after(*stop_after, 0, total_steps); !s.ok())
    return fail("train", s.message(), 2);
  std::string resumed_trainer;
  if (resumed)
    if (auto it = resumed->meta.extra.find("trainer"); it != resumed->meta.extra.end())
      resumed_trainer = it->second;
  std::optional<node::LoadedCheckpoint> base;
  if (auto path = flags.get("base")) {
    if (resumed) return fail("train", "--base and --resume exclude each other (drop --base)", 2);
    auto ck = node::load_checkpoint(*path);
    if (!ck.ok()) return fail("train", "cannot load --base: " + ck.status().message());
    base = std::move(ck).value();
  }
  auto lora = lora_from_flags(flags);
  if (!lora.ok()) return fail("train", lora.status().message(), 2);
  auto setup_or =
      make_train_setup(flags, resumed ? &*resumed : nullptr, total_steps, base ? &*base : nullptr);
  if (!setup_or.ok()) return fail("train", setup_or.status().message(), 2);
  TrainSetup& setup = *setup_or;
  if (algorithms::lora_enabled(*lora) && setup.trainer.optimizer == algorithms::InnerOptimizer::kMuon)
    return fail("train", "--optimizer muon is not available for LoRA adapters yet: drop --lora-rank "
                "or use --optimizer adamw", 2);
  if (resumed && !resumed_trainer.empty() && resumed_trainer != setup.trainer_summary)
    std::fprintf(stderr,
                 "atoll train: note: optimizer settings differ from the checkpoint's (checkpoint: "
                 "%s; now: %s): the run will not match an uninterrupted one\n",
                 resumed_trainer.c_str(), setup.trainer_summary.c_str());

  InnerTrainer trainer(setup.model, setup.trainer);
  RunParams rp;
  rp.lora = *lora;
  auto start_or = start_params(setup, resumed ? &*resumed : nullptr, base ? &*base : nullptr,
                               flags.get_or("resume", ""), trainer, rp);
  if (!start_or.ok()) return fail("train", start_or.status().message(), 2);
  const int64_t start = *start_or;
  if (resumed && start >= total_steps)
    return fail("train",
                "checkpoint is at step " + std::to_string(start) + ", nothing to do for --steps " +
                    std::to_string(total_steps) + " (raise --steps)",
                2);
  if (Status s = check_stop_after(*stop_after, start, total_steps); !s.ok())
    return fail("train", s.message(), 2);
  ParamSet& params = rp.trained();
  const bool with_lora = algorithms::lora_enabled(rp.lora);

  const std::string out_dir = flags.get_or("out", "runs/train");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return fail("train", "cannot create --out directory " + out_dir + ": " + ec.message());
  const std::string ckpt_path = out_dir + "/checkpoint.safetensors";

  auto save = [&](int64_t step_done) -> Status {
    node::CheckpointMeta meta;
    meta.model = setup.model;
    meta.window = setup.trainer.seq;
    meta.step = step_done;
    meta.seed = setup.seed;
    meta.tokenizer = setup.site.tokenizer_blob;
    meta.token_ids_only = !setup.site.train.bytes_countable;
    meta.extra["data"] = setup.data_spec;
    meta.extra["trainer"] = setup.trainer_summary;
    meta.extra["total_steps"] = std::to_string(total_steps);
    if (auto b = flags.get("base")) meta.extra["base"] = *b;
    meta.lora = rp.lora;
    // A run from a checkpoint keeps its Hugging Face files and context (resumed: its own again).
    if (resumed) node::carry_base_meta(resumed->meta, meta);
    if (base) node::carry_base_meta(base->meta, meta);
    Status s = node::save_checkpoint(ckpt_path, meta, *rp.model, &trainer.optimizer(),
                                     with_lora ? &rp.adapters : nullptr);
    if (!s.ok()) return Status(s.code(), "cannot write checkpoint: " + s.message());
    std::printf("checkpoint: %s (step %" PRId64 ", sha256 %s)\n", ckpt_path.c_str(), step_done,
                params.fingerprint().substr(0, 16).c_str());
    return Status::Ok();
  };

  print_train_banner(setup, rp, total_steps,
                     resumed ? std::optional<int64_t>(start) : std::nullopt);

  // Steps [start, end): the whole schedule, or up to --stop-after (then a checkpoint to resume).
  const int64_t end = *stop_after > 0 ? *stop_after : total_steps;
  StepProgress progress(start, total_steps, *log_every);
  // SIGINT/SIGTERM: the step under way ends, a checkpoint is written, and the process exits
  // 128 + the signal with the command that resumes (it was killed at once, checkpoint lost).
  const std::atomic<bool>* stop = install_stop_signals();
  int64_t stopped_at = -1;
  simulate::TrainOnDataOptions o;
  o.data_seed = setup.seed;
  o.first_step = start;
  o.end_step = end;
  o.after_step = [&](const simulate::TrainedStep& t) -> Status {
    const int64_t done = t.step + 1;
    progress.add(t, done == total_steps);
    if ((*eval_every > 0 && done % *eval_every == 0) || done == total_steps) {
      std::printf(
          "eval  step %" PRId64 " | %s\n", done,
          node::validation_figure(validation(trainer, params, setup, *eval_tokens)).c_str());
      std::fflush(stdout);
    }
    const bool stopping = stop->load() && done < end;
    if ((*ckpt_every > 0 && done % *ckpt_every == 0) || done == end || stopping)
      ATOLL_RETURN_IF_ERROR(save(done));
    if (!stopping) return Status::Ok();
    stopped_at = done;
    return Aborted("stopped on request");
  };
  if (Status s = simulate::train_on_data(trainer, params, setup.site.train, o); !s.ok()) {
    if (stopped_at < 0) return fail("train", s.message());
    print_resume_line("stopped on request", stopped_at, total_steps, flags, ckpt_path);
    return stopped_exit_code();
  }
  if (end < total_steps) print_resume_line("stopped", end, total_steps, flags, ckpt_path);
  std::printf("final sha256 %s\n", params.fingerprint().c_str());
  if (*sample_n > 0) {
    std::vector<int32_t> prompt = setup.site.tokenizer->encode("The ");
    auto gen =
        trainer.model().generate(params, prompt, static_cast<int>(*sample_n), 0.8f, 40, setup.seed);
    if (gen.ok()) {
      std::printf("sample: The %s\n", setup.site.tokenizer->decode(*gen).c_str());
    }
  }
  return 0;
}

}  // namespace atl::cli
