// What a site needs to redo a round bit for bit after a crash: the state the round mutates,
// copied when the site starts working on it.
//
// A round r is committed or not, atomically, by the coordinator. Until the site hears of the
// commit (its next task is round r + 1), the work it did for round r may be thrown away: the
// coordinator crashed and restarted round r from θ_r, or restarted the round for lack of quorum.
// Redoing round r from the *advanced* state (AdamW moments and step count after round r's
// steps, error feedback after round r's update) would commit another θ_{r+1} than the
// uninterrupted run. So the site keeps a RoundSnapshot of the state at the start of the round
// it works on and puts it back when a task for that same round comes again.
//
// What is derived rather than copied: θ (pulled: θ_r is committed and fingerprinted), the
// batches (sample_global_batch(seed, global step), the task carries the step), the learning
// rate and the stochastic-rounding streams (keyed by the global step). What is copied: the inner
// optimizer state (InnerStep::save_state: AdamW m and v, 2·numel floats, and its step count;
// Hydra's subnetwork), the error feedback and plan of the SyncStrategy (≤ numel floats), and for
// Streaming DiLoCo θ_local (numel floats): a streaming round starts before the previous one is
// known to be committed (its first τ steps overlap the previous sync), so its snapshot is the
// state after the previous round's update, before those steps, and redoing it trains the τ
// steps and the merge again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/inner_step.h"
#include "node/sync_strategy.h"

namespace atl::node {

struct RoundSnapshot {
  uint64_t round = 0;  // the round this state starts
  std::unique_ptr<InnerState> inner;
  std::unique_ptr<SyncState> sync;
  // Streaming DiLoCo, taken before the overlapped steps of `round`: θ_local then (the previous
  // round's local parameters) and how many steps overlapped the sync before the merge.
  std::optional<algorithms::ParamSet> local;
  uint32_t overlap_steps = 0;
};

// Copies the state of `inner` and `sync` (and `local`, when given) as the start of `round`.
// FAILED_PRECONDITION when the inner step cannot copy its state (a GPU's).
StatusOr<RoundSnapshot> take_round_snapshot(uint64_t round, const InnerStep& inner,
                                            const SyncStrategy& sync,
                                            const algorithms::ParamSet* local,
                                            uint32_t overlap_steps);

// Puts the snapshot's state back into `inner`, `sync` and, when it holds θ_local, `local`.
Status restore_round_snapshot(const RoundSnapshot& snapshot, InnerStep& inner, SyncStrategy& sync,
                              algorithms::ParamSet& local);

}  // namespace atl::node
