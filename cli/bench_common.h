#pragma once

#include "cli/commands.h"

namespace atl::cli {

// `atoll bench codecs`: codec encode/decode GB/s against memcpy (cli/bench_codecs.cc).
int bench_codecs(const Args& args);

// `atoll bench distill-loss`: fused vs unfused distillation loss, time and peak extra memory
// (cli/bench_distill.cc).
int bench_distill_loss(const Args& args);

// `atoll bench moe`: MoE FFN layer forward+backward against a dense FFN of equal active FLOPs
// (cli/bench_moe.cc).
int bench_moe(const Args& args);
// `atoll bench hydra`: five subnetwork fine-tuning methods at heterogeneous budgets
// (cli/bench_hydra.cc).
int bench_hydra(const Args& args);
// `atoll bench lane`: the bulk lane's own pull and push rate, no engine (cli/bench_lane.cc).
int bench_lane(const Args& args);

}  // namespace atl::cli
