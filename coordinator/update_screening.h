// What the commit of a round does with its updates before and around the outer step
// (docs/coordinator.md, "Screening and robust aggregation"): screens each update's norm against
// the round's robust limit (algorithms/diloco/robust.h), and applies the strategy's outer step so
// that θ_{r+1} is always finite — leaving out, one at a time, the update with the largest norm
// while the step would produce a non-finite value, and skipping the step (θ_{r+1} = θ_r) when
// none is left. No input from the network can make a round uncommittable.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "algorithms/diloco/robust.h"
#include "coordinator/round_strategy.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

// One update's screening: its norm as received and what was done with it.
struct ScreenedUpdate {
  double norm = 0.0;
  algorithms::ScreenAction action = algorithms::ScreenAction::kKept;
  std::string why;  // for clipped and dropped updates: one line for the log and the audit
};

struct ScreenOutcome {
  double median_norm = 0.0;
  double limit = 0.0;                             // +inf when screening is off
  std::map<std::string, ScreenedUpdate> by_node;  // every update that was screened
};

// Screens `updates` in place: a clipped update's Δ is scaled to the limit, a dropped one is
// erased. Updates within the limit are not touched (bit for bit).
ScreenOutcome screen_updates(PendingUpdates& updates, const algorithms::ScreenOptions& options);

// Differential privacy (algorithms/diloco/privacy.h): scales every update whose L2 norm is over
// `clip_norm` down to it (records "clipped" with the reason in `screened`, whose norms are the
// updates' as received). Returns how many were clipped.
size_t clip_updates_for_privacy(PendingUpdates& updates, double clip_norm, ScreenOutcome& screened);

struct StepOutcome {
  // Updates left out because the step with them was not finite (in the order they were left out).
  std::vector<std::string> dropped_nonfinite;
  bool skipped = false;  // no update was applied: θ and momentum are θ_r's
};

// θ_{r+1}, momentum_{r+1} ← the strategy's aggregate + outer step of `updates` on θ_r (theta_r,
// momentum_r: numel each), finite in every element. Updates that had to be left out are erased
// from `updates`. An error is a strategy error (a bug or a broken invariant), never the data.
StatusOr<StepOutcome> apply_finite_step(const RoundStrategy& strategy, uint64_t round,
                                        PendingUpdates& updates, bool has_momentum,
                                        const std::vector<float>& theta_r,
                                        const std::vector<float>& momentum_r,
                                        std::vector<float>& theta_next,
                                        std::vector<float>& momentum_next);

}  // namespace atl::coordinator
