// The fused, tiled distillation loss (algorithms/distill/loss.h) against the unfused loss that
// materializes the N×V logits: time and peak extra memory of each, as `atoll bench distill-loss`
// reports them.
//
// Every variant computes the same thing: student logits from (h, W), teacher logits from the
// teacher's own head (h_t, W_t), loss forward and backward into dh and dW. The teacher head GEMM
// is part of the timed work in every variant (co-located distillation); the unfused variants
// hold its N×V output, the fused ones compute it tile by tile.
//   fused R×S        FusedDistillLoss, R rows per tile, S vocabulary shards
//   fused top-k      the same with top-k teacher targets (built beforehand; build time apart)
//   unfused          the same code with R = N and S = 1: student and teacher (N, V) buffers
//   reference        reference_loss: plain per-row log-softmax in double over (N, V) buffers
// Memory: `extra_bytes` counts what each variant allocates beyond its inputs and outputs;
// `rss_growth` is the growth of the process's peak RSS over the inputs, measured with the
// variants run in increasing order of extra_bytes (the peak only ever rises).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/distill/loss.h"
#include "kernels/core/status.h"

namespace atl::measure {

struct DistillLossSetup {
  int N = 0, C = 0, Ct = 0, V = 0;        // rows, student and teacher hidden sizes, vocabulary
  algorithms::distill::LossConfig base;   // α, τ (R, S per variant)
  int k = 0;                              // top-k variant's k (0: none)
  int64_t reps = 3;                       // timed runs per variant (the median is kept)
  int threads = 0;                        // kernel threads (0 = all cores)
  uint64_t seed = 0;                      // of the synthetic inputs
  std::vector<std::pair<int, int>> tiles;  // fused (R, S)
  bool reference = false;                  // also time the plain reference loss (slow)
};

// OK when the setup can run, else one line: N·V must stay below 2^31 (the unfused loss holds
// N×V), k at most V.
Status validate(const DistillLossSetup& st);

struct DistillLossVariant {
  std::string name;        // fused, fused_topk, unfused, reference
  int R = 0, S = 0;        // rows per tile, vocabulary shards
  int k = 0;               // top-k ids per row (top-k variant only)
  bool reference = false;  // plain reference_loss
  size_t extra_bytes = 0;
  double ms = 0, loss = 0;  // median time of forward+backward; the loss it computed
  long long rss_growth = 0;  // peak RSS growth over the inputs, bytes
};

struct DistillLossReport {
  std::vector<DistillLossVariant> variants;  // in increasing order of extra_bytes
  double topk_build_ms = 0;                  // teacher side: building the top-k targets
  int threads = 0;                           // kernel threads used
};

// Builds the inputs, then times every variant: one warm-up run (which sets its peak RSS), then
// the median of st.reps runs.
StatusOr<DistillLossReport> measure_distill_loss(const DistillLossSetup& st);

}  // namespace atl::measure
