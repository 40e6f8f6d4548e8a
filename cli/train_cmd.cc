// `atoll train`: single-site training with progress, validation in bits per byte, safetensors
// checkpoints and a bitwise-exact --resume.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "algorithms/data/dataset.h"
#include "algorithms/optim/inner_trainer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/progress.h"
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
  return f;
}

double validation_bpb(InnerTrainer& trainer, const ParamSet& params, const TrainSetup& setup,
                      int64_t eval_tokens) {
  return node::evaluate_bpb(trainer.model(), params, setup.site.validation, *setup.site.tokenizer,
                            setup.trainer.seq, setup.trainer.batch, eval_tokens)
      .bpb;
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
    ++window_steps_;
    const int64_t done = t.step + 1;
    if (done % every_ != 0 && !last) return;
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - window_start_).count();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta =
        (elapsed / static_cast<double>(done - first_)) * static_cast<double>(total_ - done);
    std::printf("step %6" PRId64 "/%" PRId64 " | loss %.4f | lr %.2e | grad %.3f | %s tok/s | "
                "ETA %s\n",
                done, total_, window_loss_ / window_steps_, st.lr, st.grad_norm,
                format_count(dt > 0 ? window_tokens_ / dt : 0).c_str(),
                format_duration(eta).c_str());
    std::printf("batch %" PRId64 " sha256 %s\n", t.step,
                algorithms::data::batch_sha256(*t.batch).substr(0, 16).c_str());
    std::fflush(stdout);
    window_start_ = now;
    window_tokens_ = 0;
    window_loss_ = 0;
    window_steps_ = 0;
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t first_, total_, every_;
  Clock::time_point start_ = Clock::now(), window_start_ = start_;
  int64_t window_tokens_ = 0;
  double window_loss_ = 0;
  int window_steps_ = 0;
};

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
  // Without --steps, a resumed run keeps the schedule length it was started with (the learning
  // rate schedule depends on it), so it ends bitwise equal to the uninterrupted run.
  int64_t total_steps = *steps;
  std::string resumed_trainer;
  if (resumed) {
    const auto& extra = resumed->meta.extra;
    if (auto it = extra.find("trainer"); it != extra.end()) resumed_trainer = it->second;
    if (auto it = extra.find("total_steps"); it != extra.end() && !flags.has("steps")) {
      char* end = nullptr;
      total_steps = std::strtoll(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0' || total_steps < 1)
        return fail("train",
                    "cannot resume: the checkpoint's total_steps '" + it->second +
                        "' is not a step count (pass --steps N)",
                    2);
    }
  }
  auto setup_or = make_train_setup(flags, resumed ? &*resumed : nullptr, total_steps);
  if (!setup_or.ok()) return fail("train", setup_or.status().message(), 2);
  TrainSetup& setup = *setup_or;
  if (resumed && !resumed_trainer.empty() && resumed_trainer != setup.trainer_summary)
    std::fprintf(stderr,
                 "atoll train: note: optimizer settings differ from the checkpoint's (checkpoint: "
                 "%s; now: %s): the run will not match an uninterrupted one\n",
                 resumed_trainer.c_str(), setup.trainer_summary.c_str());

  InnerTrainer trainer(setup.model, setup.trainer);
  ParamSet params(algorithms::make_layout(setup.model));
  int64_t start = 0;
  if (resumed) {
    params = std::move(resumed->params);
    if (!resumed->has_optimizer)
      return fail("train", "cannot resume from " + *flags.get("resume") +
                               ": it has no optimizer state (it is a model-only checkpoint)");
    trainer.optimizer().m() = std::move(resumed->m);
    trainer.optimizer().v() = std::move(resumed->v);
    trainer.optimizer().set_step_count(resumed->optimizer_step);
    start = resumed->meta.step;
    if (start >= total_steps)
      return fail("train",
                  "checkpoint is at step " + std::to_string(start) +
                      ", nothing to do for --steps " + std::to_string(total_steps) +
                      " (raise --steps)",
                  2);
  } else {
    algorithms::init_params(params, setup.model, setup.seed);
  }

  const std::string out_dir = flags.get_or("out", "runs/train");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return fail("train", "cannot create --out directory " + out_dir + ": " + ec.message());
  const std::string ckpt_path = out_dir + "/checkpoint.safetensors";

  auto save = [&](int64_t step_done) -> Status {
    node::CheckpointMeta meta;
    meta.model = setup.model;
    meta.step = step_done;
    meta.seed = setup.seed;
    meta.tokenizer = setup.site.tokenizer_blob;
    meta.extra["data"] = setup.data_spec;
    meta.extra["trainer"] = setup.trainer_summary;
    meta.extra["total_steps"] = std::to_string(total_steps);
    Status s = node::save_checkpoint(ckpt_path, meta, params, &trainer.optimizer());
    if (!s.ok()) return Status(s.code(), "cannot write checkpoint: " + s.message());
    std::printf("checkpoint: %s (step %" PRId64 ", sha256 %s)\n", ckpt_path.c_str(), step_done,
                params.fingerprint().substr(0, 16).c_str());
    return Status::Ok();
  };

  std::printf(
      "atoll train: %s params, data %s (%s train / %s val tokens), tokenizer %s, "
      "B=%d T=%d, steps %" PRId64 "%s\n",
      format_count(static_cast<double>(params.numel())).c_str(), setup.data_spec.c_str(),
      format_count(static_cast<double>(setup.site.train.size())).c_str(),
      format_count(static_cast<double>(setup.site.validation.size())).c_str(),
      setup.tokenizer_name.c_str(), setup.trainer.batch, setup.trainer.seq, total_steps,
      resumed ? (" (resuming at step " + std::to_string(start) + ")").c_str() : "");
  std::fflush(stdout);

  // Steps [start, end): the whole schedule, or up to --stop-after (then a checkpoint to resume).
  const int64_t end =
      *stop_after > start && *stop_after < total_steps ? *stop_after : total_steps;
  StepProgress progress(start, total_steps, *log_every);
  simulate::TrainOnDataOptions o;
  o.data_seed = setup.seed;
  o.first_step = start;
  o.end_step = end;
  o.after_step = [&](const simulate::TrainedStep& t) -> Status {
    const int64_t done = t.step + 1;
    progress.add(t, done == total_steps);
    if ((*eval_every > 0 && done % *eval_every == 0) || done == total_steps) {
      std::printf("eval  step %" PRId64 " | val bpb %.4f\n", done,
                  validation_bpb(trainer, params, setup, *eval_tokens));
      std::fflush(stdout);
    }
    if ((*ckpt_every > 0 && done % *ckpt_every == 0) || done == end) return save(done);
    return Status::Ok();
  };
  if (Status s = simulate::train_on_data(trainer, params, setup.site.train, o); !s.ok())
    return fail("train", s.message());
  if (end < total_steps)
    std::printf("stopped after step %" PRId64 " of %" PRId64 ": continue with --resume %s\n", end,
                total_steps, ckpt_path.c_str());
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
