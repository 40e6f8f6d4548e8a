// `atoll bench train|sgemm|codecs`: machine-readable speed measurements (JSON with --json).
#include <cstdio>

#include "algorithms/optim/inner_trainer.h"
#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/train_setup.h"
#include "kernels/cpu/ops.h"
#include "measure/sgemm.h"
#include "measure/train_step.h"

namespace atl::cli {

namespace {

int bench_train(const Args& args) {
  auto specs = common_model_flags();
  specs.push_back({"steps", true, "timed steps (after 2 warm-up steps)", "10"});
  specs.push_back({"json", false, "print one JSON line", ""});
  specs.push_back({"sgemm-n", true, "size of the square sgemm measured alongside", "1024"});
  Flags flags("bench train", specs);
  if (Status s = flags.parse(args); !s.ok()) return fail("bench train", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  algorithms::ModelConfig model;
  algorithms::TrainerConfig trainer;
  uint64_t seed = 0;
  int threads = 0;
  if (Status s = apply_model_flags(flags, model, trainer, seed, threads); !s.ok())
    return fail("bench train", s.message(), 2);
  auto steps = flags.get_int("steps", 10, 1, 100000);
  auto sgemm_n = flags.get_int("sgemm-n", 1024, 64, 8192);
  if (!steps.ok()) return fail("bench train", steps.status().message(), 2);
  if (!sgemm_n.ok()) return fail("bench train", sgemm_n.status().message(), 2);
  auto t = measure::time_train_steps(model, trainer, seed, threads, *steps);
  if (!t.ok()) return fail("bench train", t.status().message(), 2);
  const double peak = measure::sgemm_gflops(static_cast<int>(*sgemm_n), threads, 1.0);
  if (flags.has("json")) {
    std::printf(
        "{\"bench\":\"train\",\"params\":%zu,\"layers\":%d,\"dim\":%d,\"heads\":%d,"
        "\"ffn\":%d,\"seq\":%d,\"batch\":%d,\"vocab\":%d,\"threads\":%d,\"steps\":%lld,"
        "\"step_ms\":%.3f,\"step_ms_mean\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.2f,\"sgemm_"
        "gflops\":%.2f,"
        "\"fraction_of_sgemm\":%.3f,\"precision\":\"%s\",\"moe_experts\":%d,\"moe_top_k\":%d,"
        "\"moe_hidden\":%d}\n",
        t->params, model.layers, model.dim, model.heads, model.ffn_hidden, trainer.seq,
        trainer.batch, model.vocab, t->threads, static_cast<long long>(*steps), t->step_ms,
        t->step_ms_mean, t->tokens_per_s, t->gflops, peak, t->gflops / peak,
        algorithms::precision_name(trainer.precision), model.moe_experts,
        model.moe_experts > 0 ? model.moe_top_k : 0, model.moe_hidden);
  } else {
    std::printf(
        "params %zu | step %.1f ms | %.0f tokens/s | %.2f GFLOP/s | sgemm %.2f GFLOP/s "
        "(%.0f%%)\n",
        t->params, t->step_ms, t->tokens_per_s, t->gflops, peak, 100.0 * t->gflops / peak);
  }
  return 0;
}

int bench_sgemm(const Args& args) {
  Flags flags("bench sgemm", {{"n", true, "matrix size", "1024"},
                              {"threads", true, "threads (0 = all cores)", "0"},
                              {"json", false, "print one JSON line", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench sgemm", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto n = flags.get_int("n", 1024, 16, 16384);
  auto threads = flags.get_int("threads", 0, 0, 1024);
  if (!n.ok()) return fail("bench sgemm", n.status().message(), 2);
  if (!threads.ok()) return fail("bench sgemm", threads.status().message(), 2);
  double g = measure::sgemm_gflops(static_cast<int>(*n), static_cast<int>(*threads), 1.0);
  if (flags.has("json"))
    std::printf("{\"bench\":\"sgemm\",\"n\":%lld,\"threads\":%d,\"gflops\":%.2f}\n",
                static_cast<long long>(*n), kernels::cpu::num_threads(), g);
  else
    std::printf("sgemm %lldx%lld: %.2f GFLOP/s\n", static_cast<long long>(*n),
                static_cast<long long>(*n), g);
  return 0;
}

}  // namespace

int cmd_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: atoll bench train [flags] [--json]\n"
        "       atoll bench sgemm [--n N] [--threads N] [--json]\n"
        "       atoll bench codecs [--numel N] [--threads N] [--json]\n"
        "       atoll bench distill-loss [--n N] [--vocab V] [--tiles RxS,...] [--json]\n"
        "       atoll bench moe [--tokens N] [--dim C] [--configs E:K:Fe,...] [--json]\n"
        "       atoll bench hydra [--quick flags, see --help] [--json]\n"
        "       atoll bench lane [--bytes N] [--transfers N] [--json]\n");
    return args.empty() ? 2 : 0;
  }
  Args rest(args.begin() + 1, args.end());
  if (args[0] == "train") return bench_train(rest);
  if (args[0] == "sgemm") return bench_sgemm(rest);
  if (args[0] == "codecs") return bench_codecs(rest);
  if (args[0] == "distill-loss") return bench_distill_loss(rest);
  if (args[0] == "moe") return bench_moe(rest);
  if (args[0] == "hydra") return bench_hydra(rest);
  if (args[0] == "lane") return bench_lane(rest);
  return fail("bench",
              "unknown benchmark '" + args[0] +
                  "': use train, sgemm, codecs, distill-loss, moe, hydra or lane",
              2);
}

}  // namespace atl::cli
