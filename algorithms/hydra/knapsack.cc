#include "algorithms/hydra/knapsack.h"

#include "kernels/core/check.h"

namespace atl::algorithms::hydra {

namespace {
struct State {
  int64_t cost;
  double value;
  int32_t parent;  // index into the previous frontier
  bool took;
};
}  // namespace

KnapsackResult solve_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity) {
  KnapsackResult res;
  res.take.assign(items.size(), 0);
  int64_t forced_cost = 0;
  for (const auto& it : items)
    if (it.forced) forced_cost += it.cost;
  if (forced_cost > capacity) return res;
  // frontiers[i] = frontier after items [0, i); sorted by cost ascending, value strictly
  // ascending.
  std::vector<std::vector<State>> fr(items.size() + 1);
  fr[0].push_back({0, 0.0, -1, false});
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& prev = fr[i];
    const auto& it = items[i];
    // Capacity left for the not-yet-seen forced items bounds every state.
    int64_t later_forced = 0;
    for (size_t j = i + 1; j < items.size(); ++j)
      if (items[j].forced) later_forced += items[j].cost;
    const int64_t cap = capacity - later_forced;
    std::vector<State> with;
    for (size_t s = 0; s < prev.size(); ++s)
      if (prev[s].cost + it.cost <= cap)
        with.push_back(
            {prev[s].cost + it.cost, prev[s].value + it.value, static_cast<int32_t>(s), true});
    std::vector<State> without;
    if (!it.forced)
      for (size_t s = 0; s < prev.size(); ++s)
        without.push_back({prev[s].cost, prev[s].value, static_cast<int32_t>(s), false});
    // Merge by cost (ties: `without` first), keep strictly increasing values.
    auto& out = fr[i + 1];
    size_t a = 0, b = 0;
    double best = -1.0;
    while (a < without.size() || b < with.size()) {
      const bool pick_a =
          b == with.size() || (a < without.size() && without[a].cost <= with[b].cost);
      const State& st = pick_a ? without[a++] : with[b++];
      if (st.value > best) {
        out.push_back(st);
        best = st.value;
      }
    }
  }
  const auto& last = fr.back();
  if (last.empty()) return res;
  // Values strictly increase with cost and every state fits: the last one is the optimum.
  int32_t s = static_cast<int32_t>(last.size()) - 1;
  res.feasible = true;
  res.value = last[s].value;
  res.cost = last[s].cost;
  for (size_t i = items.size(); i-- > 0;) {
    const State& st = fr[i + 1][s];
    res.take[i] = st.took ? 1 : 0;
    s = st.parent;
  }
  return res;
}

KnapsackResult brute_force_knapsack(const std::vector<KnapsackItem>& items, int64_t capacity) {
  if (items.size() > 24) internal_error("brute_force_knapsack: too many items");
  KnapsackResult best;
  best.take.assign(items.size(), 0);
  const uint32_t n = static_cast<uint32_t>(items.size());
  for (uint32_t m = 0; m < (1u << n); ++m) {
    int64_t c = 0;
    double v = 0;
    bool ok = true;
    for (uint32_t i = 0; i < n; ++i) {
      const bool t = (m >> i) & 1u;
      if (items[i].forced && !t) ok = false;
      if (t) {
        c += items[i].cost;
        v += items[i].value;
      }
    }
    if (!ok || c > capacity) continue;
    if (!best.feasible || v > best.value) {
      best.feasible = true;
      best.value = v;
      best.cost = c;
      for (uint32_t i = 0; i < n; ++i) best.take[i] = (m >> i) & 1u;
    }
  }
  return best;
}

}  // namespace atl::algorithms::hydra
