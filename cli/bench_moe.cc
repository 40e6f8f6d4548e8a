// `atoll bench moe`: forward + backward time of the CPU MoE FFN layer against a dense SwiGLU FFN
// of equal active FLOPs, per MoE shape (measure/moe.h says what is timed and how). This file
// turns flags into shapes and prints one line (or JSON object) per shape.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/flags.h"
#include "coordinator/experiment_config.h"
#include "kernels/cpu/ops.h"
#include "measure/moe.h"

namespace atl::cli {

int bench_moe(const Args& args) {
  Flags flags("bench moe",
              {{"tokens", true, "tokens per pass N (B·T)", "2048"},
               {"dim", true, "model width C", "256"},
               {"configs", true, "MoE shapes E:K:Fe, comma separated", "8:2:384,32:4:192,64:8:96"},
               {"seconds", true, "minimum time per variant", "1.0"},
               {"threads", true, "CPU threads (0 = all cores)", "1"},
               {"json", false, "one JSON object per configuration", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench moe", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto N = flags.get_int("tokens", 2048, 1, 1 << 20);
  auto C = flags.get_int("dim", 256, 2, 1 << 14);
  auto secs = flags.get_double("seconds", 1.0, 0.0, 600.0);
  auto th = flags.get_int("threads", 1, 0, 1024);
  for (const Status& s : {N.status(), C.status(), secs.status(), th.status()})
    if (!s.ok()) return fail("bench moe", s.message(), 2);
  std::vector<measure::MoeShape> configs;
  const std::string list = flags.get_or("configs", "8:2:384,32:4:192,64:8:96");
  for (size_t pos = 0; pos <= list.size();) {
    const size_t end = std::min(list.find(',', pos), list.size());
    measure::MoeShape c{};
    if (std::sscanf(list.substr(pos, end - pos).c_str(), "%d:%d:%d", &c.experts, &c.top_k,
                    &c.expert_hidden) != 3 ||
        c.experts < 1 || c.top_k < 1 || c.top_k > c.experts || c.expert_hidden < 1)
      return fail("bench moe",
                  "--configs: '" + list.substr(pos, end - pos) +
                      "' is not E:K:Fe with 1 <= K <= E and Fe >= 1 (e.g. 8:2:384)",
                  2);
    // The experiment config's MoE bounds, and the parameter cap of every model (an expert's
    // three matrices are C × Fe each): a larger shape aborted in an allocation or ran for hours.
    const int64_t weights = int64_t{c.experts} * 3 * *C * c.expert_hidden;
    if (c.experts > 4096 || c.expert_hidden > (1 << 20) ||
        weights > static_cast<int64_t>(coordinator::kMaxParams))
      return fail("bench moe",
                  "--configs: '" + list.substr(pos, end - pos) +
                      "' is too large: E <= 4096, Fe <= 1048576 and E·3·dim·Fe <= " +
                      std::to_string(coordinator::kMaxParams) + " expert weights",
                  2);
    configs.push_back(c);
    pos = end + 1;
  }
  kernels::cpu::set_num_threads(static_cast<int>(*th));
  const int n = static_cast<int>(*N), c = static_cast<int>(*C);
  for (const measure::MoeShape& cf : configs) {
    const measure::MoeTiming t = measure::time_moe_against_dense(n, c, cf, *secs);
    const double moe_ms = t.moe_fwd_ms + t.moe_bwd_ms, dense_ms = t.dense_fwd_ms + t.dense_bwd_ms;
    if (flags.has("json")) {
      std::printf(
          "{\"bench\":\"moe\",\"tokens\":%d,\"dim\":%d,\"experts\":%d,\"top_k\":%d,"
          "\"expert_hidden\":%d,\"dense_hidden\":%d,\"threads\":%d,\"moe_fwd_ms\":%.3f,"
          "\"moe_bwd_ms\":%.3f,\"dense_fwd_ms\":%.3f,\"dense_bwd_ms\":%.3f,\"moe_over_dense\":%.3f,"
          "\"moe_gflops\":%.2f,\"dense_gflops\":%.2f,\"largest_group\":%d,\"reps\":%d}\n",
          n, c, cf.experts, cf.top_k, cf.expert_hidden, t.dense_hidden,
          kernels::cpu::num_threads(), t.moe_fwd_ms, t.moe_bwd_ms, t.dense_fwd_ms, t.dense_bwd_ms,
          moe_ms / dense_ms, t.moe_gflops, t.dense_gflops, t.largest_group, t.reps);
    } else {
      std::printf(
          "E=%-3d K=%-2d Fe=%-4d | MoE fwd %7.2f ms bwd %7.2f ms | dense F=%-4d fwd %7.2f ms bwd "
          "%7.2f ms | MoE/dense %.2fx | largest group %d of %d rows\n",
          cf.experts, cf.top_k, cf.expert_hidden, t.moe_fwd_ms, t.moe_bwd_ms, t.dense_hidden,
          t.dense_fwd_ms, t.dense_bwd_ms, moe_ms / dense_ms, t.largest_group, n * cf.top_k);
    }
  }
  return 0;
}

}  // namespace atl::cli
