// Hydra selection (DESIGN.md "Hydra subnetworks"): from every site's budget and importance
// scores, choose the global trainable layer set S and each site's subnetwork.
//
// Objective of a site (docs/hydra.md, "Selection objective"): the importance of what it trains
// minus λ (removal_penalty) times the importance of what it removes from its forward pass,
//   value_k = Σ_{u∈Hₖ} score_k(u) − λ · Σ_{u removed} score_k(u).
// The Taylor score |g·w| is the first-order loss change of zeroing the unit, so the second sum
// is the damage a pruned forward does to the function the site trains; a frozen unit runs
// forward only and does no damage. λ = 0 is the plain issue-7 objective (only trained units
// count), under which a small site prunes most of the network to train a few units everywhere.
//
// Per site k and candidate S (l0 = min S), costs from cost.h, capacity = budget_k × full FLOPs:
//  1. fixed: the output head (forward + backward).
//  2. frozen units (layers ∉ S, forward only) within (1 − min_train_share) of the capacity: exact
//     0/1 knapsack maximizing the kept score (= least removal damage).
//  3. trained units Hₖ ⊆ units(S) (heads and FFN blocks of S's layers): exact 0/1 knapsack,
//     value (1 + λ)·score (training a unit of S also keeps it in the forward), cost 3·a, capacity
//     = what 1. and 2. left. Units of S not chosen are removed from the site's computation.
//  4. capacity that 3. did not use goes to the frozen units 2. left out (exact knapsack).
// Objective of S: first the number of units of S held by fewer than min_coverage sites
// (smaller is better; "when the budgets allow" = coverage is repaired first: an uncovered unit
// is forced into the site that loses the least value by taking it), then Σₖ value_k,
// then the lexicographically smallest S (as a bit string from layer 0): deterministic.
// S is searched exhaustively (every non-empty subset) for L <= exhaustive_max_layers, beyond
// that greedily (add the best layer while the objective improves) then by local search (single
// add, remove or swap moves, first improvement in a fixed order) until no move improves.
//
// Trained layers per site (SelectOptions::trained_layers = kPerSite, docs/hydra.md "Per-site
// trained layers"): instead of one S for all, every site k chooses its own S_k, the candidate that
// maximizes its own value_k (steps 1-4 within its own budget; ties: the smallest S_k as a bit
// string), by the same exhaustive / greedy + local search. A full-budget site then trains every
// layer while a small one keeps a few layers trained at full width. The aggregation is per element
// with masks, so an element no site trains keeps θ and momentum. Coverage is counted over the
// units of the union of the S_k and repaired within the sites whose S_k contains the unit's
// layer (a site's trained layers are never enlarged for coverage; an uncovered unit no such site
// can afford stays reported in uncovered_units). Deterministic: sites in id order, each S_k exact
// for L <= exhaustive_max_layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/status.h"

namespace atl::algorithms::hydra {

struct SiteInput {
  std::string id;     // sites are processed in ascending id order
  double budget = 1;  // fraction of the full model's training FLOPs, (0, 1]
  UnitScores scores;
};

// Whether all sites share one trained layer set S or each site chooses its own S_k.
enum class TrainedLayers { kGlobal, kPerSite };

// "global" | "per_site" (the configuration key hydra.trained_layers).
const char* trained_layers_name(TrainedLayers t);
// One line naming the accepted values for anything else.
StatusOr<TrainedLayers> parse_trained_layers(const std::string& name);

struct SelectOptions {
  int min_coverage = 1;           // every unit of S held by at least this many sites
  double min_train_share = 0.5;   // of each budget kept for training when frozen units compete
  double removal_penalty = 10.0;  // λ in [0, 100]: weight of the removed units' scores
  int exhaustive_max_layers = 12;
  TrainedLayers trained_layers = TrainedLayers::kGlobal;  // one S, or S_k per site
};

struct SiteSelection {
  std::string id;
  Subnet subnet;
  double value = 0;           // trained_value − λ · removed_score (the site's objective)
  double trained_value = 0;   // Σ score of the trained units (Hₖ)
  double removed_score = 0;   // Σ score of the units removed from the forward pass
  double cost_fraction = 0;   // cost_fraction(subnet)
  bool within_budget = true;  // false only when even the output head exceeds the budget
};

struct Selection {
  std::vector<uint8_t> layers;       // (L) 1 = in S (per site: in the union of the S_k; each
                                     // site's own S_k is its subnet's train flags)
  std::vector<SiteSelection> sites;  // ascending id
  double total_value = 0;            // Σₖ value_k
  int uncovered_units = 0;           // units of S held by fewer than min_coverage sites
};

// One line naming the problem for bad options, budgets, duplicate ids or mismatched scores.
StatusOr<Selection> select_subnetworks(const CostModel& cm, std::vector<SiteInput> sites,
                                       const SelectOptions& opt);

// The cheapest subnetwork that trains anything: the output head (forward + backward, step 1)
// plus one unit of the top layer trained, the cheaper of a head unit and an FFN block, every
// other unit removed. Its cost_fraction is the smallest budget at which select_site can give a
// site a trained unit; below it a site would run rounds that train nothing.
Subnet cheapest_training_subnet(const CostModel& cm);

// The subnetwork of one site for a fixed S (steps 1-3 above), optionally with units forced in
// (indices into units(S) in the order: layers of S ascending, per layer heads then blocks).
SiteSelection select_site(const CostModel& cm, const SiteInput& site, const std::vector<uint8_t>& S,
                          const SelectOptions& opt, const std::vector<uint8_t>& forced = {});

}  // namespace atl::algorithms::hydra
