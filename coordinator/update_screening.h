// What the commit of a round does with its updates before and around the outer step
// (docs/coordinator.md, "Screening and robust aggregation"): screens each update's norm against
// the round's robust limit (algorithms/diloco/robust.h), and applies the strategy's outer step so
// that θ_{r+1} is always finite — leaving out, one at a time, the update with the largest norm
// while the step would produce a non-finite value, and skipping the step (θ_{r+1} = θ_r) when
// none is left. No input from the network can make a round uncommittable.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/compress/outer_update.h"
#include "algorithms/diloco/robust.h"
#include "coordinator/round_strategy.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

// One update's screening: its norm as received and what was done with it.
struct ScreenedUpdate {
  double norm = 0.0;
  algorithms::ScreenAction action = algorithms::ScreenAction::kKept;
  std::string why;  // for clipped and dropped updates: one line for the log and the audit
  // For clipped and dropped updates, the check that acted: "norm" (over the round's limit),
  // "replay" (a repeat of the node's previous accepted update), "stale" (trained from an earlier
  // θ: closer to the previous round's updates than to this round's), "privacy" (over
  // privacy.clip_norm), "nonfinite" (the outer step with it is not finite).
  std::string reason;
};

struct ScreenOutcome {
  double median_norm = 0.0;
  double limit = 0.0;                             // +inf when screening is off
  std::map<std::string, ScreenedUpdate> by_node;  // every update that was screened
};

// Screens `updates` in place: a clipped update's Δ is scaled to the limit, a dropped one is
// erased. Updates within the limit are not touched (bit for bit).
ScreenOutcome screen_updates(PendingUpdates& updates, const algorithms::ScreenOptions& options);

// Replay detection (algorithms/diloco/replay.h): per node, the count sketch of its last accepted
// update and the layout that update had. Only updates of the same layout are compared: the same
// size, Hydra indices and synced range (a Streaming DiLoCo site's fragments differ round to round).
struct ReplayEntry {
  uint64_t layout = 0;
  std::vector<double> sketch;  // algorithms::kReplaySketchBuckets values
};
using ReplayMemory = std::map<std::string, ReplayEntry>;

// The layout key of `update` in a round whose synced range is `range` (a hash, fixed across
// builds and restarts).
uint64_t update_layout_key(const PendingUpdate& update, algorithms::compress::UpdateRange range);

// Drops (erases) every update whose sketch has cosine ≥ min_cosine to its node's entry in
// `previous` of the same layout and is also kReplayCloserThanTheRound times closer to it than
// the round's other updates are to theirs (median of 1 − cos; an exact repeat always is; with
// no other update to compare, only an exact repeat is dropped),
// recording it in `screened` as dropped for "replay". Returns the entries (layout and sketch) of
// the updates left, for remember_accepted. min_cosine ≤ 0: no update is compared or sketched
// (returns nothing).
inline constexpr double kReplayCloserThanTheRound = 10;
ReplayMemory screen_replays(PendingUpdates& updates, const ReplayMemory& previous,
                            double min_cosine, algorithms::compress::UpdateRange range,
                            ScreenOutcome& screened);

// The memory after a commit: `previous`, with the entry of every node in `applied` (the updates
// the outer step used) replaced by its entry in `sketched`. A node whose update was dropped keeps
// its earlier entry, so a replay is compared with the last update that counted.
ReplayMemory remember_accepted(const ReplayMemory& previous, ReplayMemory sketched,
                               const PendingUpdates& applied);

// The memory as bytes for the store's round commit, and back:
//   "ATR1" | entries u64 | per entry (node id order): id bytes u32 | id | layout u64 |
//   values u64 | values × f64, all little-endian.
// decode: DATA_LOSS naming `what` when the bytes are not such a memory.
std::string encode_replay_memory(const ReplayMemory& memory);
StatusOr<ReplayMemory> decode_replay_memory(std::string_view bytes, const std::string& what);

// The count sketches (with their layouts) of every update in `updates`, by node id.
ReplayMemory sketch_updates(const PendingUpdates& updates, algorithms::compress::UpdateRange range);

// One update's stale figure (previous − current, below) and the node that sent it.
struct SiteFigure {
  std::string node_id;
  double figure = 0.0;
  bool operator==(const SiteFigure&) const = default;
};

// What the commit's screening remembers from round to round: each node's last accepted update
// (replay detection), which nodes' updates the last committed round applied, whose entries in
// `replay` are then that round's updates, and the stale figures of the updates that stale
// detection kept in the last committed rounds (stale-update detection).
struct ScreeningMemory {
  ReplayMemory replay;
  std::set<std::string> applied_last_round;
  // Per committed round (oldest first, at most kStaleHistoryRounds rounds, a round without
  // figures as an empty list): previous − current of each update the stale check kept, with its
  // node, in node id order.
  std::vector<std::vector<SiteFigure>> stale_history;
};

// Stale-update detection: an update trained from an earlier θ (a site sending its previous
// round's Δ one round late, which the coordinator never saw) points at the previous round's
// updates more than at this round's. With Ŝ = S/‖S‖ the unit count sketch of an update, for
// update i of layout L:
//   previous_i = cos(S_i, Σ Ŝ_j over the nodes j ≠ i whose update of layout L the last
//                committed round applied)
//   current_i  = cos(S_i, Σ Ŝ_k over this round's other updates k ≠ i of layout L)
// (unit sketches: one update of a huge norm weighs as much as any other). Defined only when
// both sums have at least one term.
struct StaleFigures {
  double previous = 0.0;
  double current = 0.0;
};

// How far back, and how far out, a figure is judged (screen_stale): against the kept figures of
// the last kStaleHistoryRounds committed rounds, once they come from at least kStaleMinSites
// nodes; an update is stale only if its figure is at least kStaleOutlierZ robust standard
// deviations above their centre (stale_baseline). Measured in docs/decisions.md ("Stale
// detection judged against the run's own figures").
inline constexpr size_t kStaleHistoryRounds = 6;
inline constexpr size_t kStaleMinSites = 3;
inline constexpr double kStaleOutlierZ = 4.0;

// The figures of every update in `updates` for which both are defined. `sketched`: the sketches
// of at least the updates in `updates` (sketch_updates); `memory`: as committed with the
// previous round.
std::map<std::string, StaleFigures> stale_figures(const PendingUpdates& updates,
                                                  const ReplayMemory& sketched,
                                                  const ScreeningMemory& memory);

// The robust centre and spread of a run's recent stale figures, taken per node so that no one
// node moves them (with three nodes or more): `median` is the lower median over nodes of each
// node's lower median figure, `spread` 1.4826 × the lower median over nodes of each node's lower
// median absolute deviation from `median` (1.4826: a normal distribution's standard deviation
// over its median absolute deviation). `sites`: how many nodes have figures in `history`.
struct StaleBaseline {
  size_t sites = 0;
  double median = 0.0;
  double spread = 0.0;
};
StaleBaseline stale_baseline(const std::vector<std::vector<SiteFigure>>& history);

struct StaleScreen {
  size_t dropped = 0;
  std::vector<SiteFigure> kept_figures;  // the figures of the updates kept, in node id order
};

// Drops (erases) every update whose figure d = previous − current is ≥ margin and, once the
// memory's history has figures of kStaleMinSites nodes, also ≥ median + kStaleOutlierZ × spread
// of that history (stale_baseline): an honest update's figure varies from round to round and run
// to run (small models, few tokens a round: up to +0.39 measured), a stale one stands out of its
// own run's figures. All figures are computed first, over the same updates: the result does not
// depend on node order. A drop is recorded in `screened` as dropped for "stale" (its norm as
// received). margin ≤ 0, or fewer than kStaleMinSites updates in the round: nothing is compared.
StaleScreen screen_stale(PendingUpdates& updates, const ReplayMemory& sketched,
                         const ScreeningMemory& memory, double margin, ScreenOutcome& screened);

// `history` with the round of `kept_figures` appended, keeping the last kStaleHistoryRounds.
std::vector<std::vector<SiteFigure>> extend_stale_history(
    std::vector<std::vector<SiteFigure>> history, std::vector<SiteFigure> kept_figures);

// The memory as bytes for the store's round commit, and back. With no node in
// applied_last_round the bytes are encode_replay_memory(replay) ("ATR1"); otherwise
//   "ATR2" | ids u64 | per id (sorted): bytes u32 | id | encode_replay_memory(replay).
// With a stale history, these bytes follow
//   "ATR3" | rounds u64 | per round: figures u64 | per figure: id bytes u32 | id | f64.
// decode: any of them; DATA_LOSS naming `what` when the bytes are none (or a figure is not
// finite).
std::string encode_screening_memory(const ScreeningMemory& memory);
StatusOr<ScreeningMemory> decode_screening_memory(std::string_view bytes, const std::string& what);

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
