// Exact 0/1 knapsack: maximize Σ value over chosen items subject to Σ cost <= capacity.
// Costs are non-negative integers (FLOPs per token), values non-negative doubles.
//
// Algorithm: Nemhauser–Ullmann Pareto frontier. Items are added in index order; after each item
// the frontier keeps only the (cost, value) states not dominated by a cheaper-or-equal state of
// higher-or-equal value. Exact for any instance; fast when costs take few distinct values (a
// model's heads all cost the same, its FFN blocks all cost the same), exponential only on
// adversarial instances, which is why the caller bounds the item count.
// Ties (same value at the same or lower cost) keep the state that does NOT take the later item,
// so the result is a deterministic function of the inputs.
#pragma once

#include <cstdint>
#include <vector>

namespace atl::algorithms::hydra {

struct KnapsackItem {
  int64_t cost = 0;     // >= 0
  double value = 0.0;   // >= 0
  bool forced = false;  // must be taken (its cost is still counted)
};

struct KnapsackResult {
  bool feasible = false;      // false iff the forced items alone exceed the capacity
  double value = 0.0;         // Σ value of the chosen items
  int64_t cost = 0;           // Σ cost of the chosen items
  std::vector<uint8_t> take;  // (items) 1 = chosen
};

KnapsackResult solve_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity);

// Reference for tests: tries every subset (items.size() <= 24).
KnapsackResult brute_force_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity);

}  // namespace atl::algorithms::hydra
