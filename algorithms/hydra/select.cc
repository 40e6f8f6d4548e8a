#include "algorithms/hydra/select.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "algorithms/hydra/knapsack.h"

namespace atl::algorithms::hydra {

namespace {

struct Unit {
  int layer;
  bool block;
  int idx;
};

std::vector<Unit> units_of(const CostModel& cm, const std::vector<uint8_t>& S, bool in_S) {
  std::vector<Unit> u;
  for (int l = 0; l < cm.model.layers; ++l) {
    if ((S[l] != 0) != in_S) continue;
    for (int h = 0; h < head_units(cm.model); ++h) u.push_back({l, false, h});
    for (int b = 0; b < cm.ffn_blocks; ++b) u.push_back({l, true, b});
  }
  return u;
}

double score(const UnitScores& s, const Unit& u) {
  return u.block ? s.ffn[static_cast<size_t>(u.layer) * s.ffn_blocks + u.idx]
                 : s.head[static_cast<size_t>(u.layer) * s.heads + u.idx];
}

void set_unit(Subnet& sn, const Unit& u) {
  (u.block ? sn.layers[u.layer].ffn_blocks : sn.layers[u.layer].heads)[u.idx] = 1;
}

struct Evaluated {
  std::vector<SiteSelection> sites;
  std::vector<std::vector<uint8_t>> held;  // (sites) × units(S)
  double total = 0;
  int uncovered = 0;
};

// Every site's subnetwork, site k with the trained layer set layer_sets[k] (the same S for all
// under kGlobal), with coverage repair over the units of the union of the sets: an uncovered unit
// is forced into the site, among those whose set contains its layer, that loses least.
Evaluated evaluate(const CostModel& cm, const std::vector<SiteInput>& sites,
                   const std::vector<std::vector<uint8_t>>& layer_sets, const SelectOptions& opt) {
  const int L = cm.model.layers;
  std::vector<uint8_t> any(L, 0);
  for (const auto& S : layer_sets)
    for (int l = 0; l < L; ++l) any[l] |= S[l];
  const std::vector<Unit> us = units_of(cm, any, true);
  const size_t K = sites.size(), U = us.size();
  // local[k][i]: index of union unit i in units_of(layer_sets[k]), or -1 if k does not train
  // its layer (under kGlobal the identity).
  std::vector<std::vector<int>> local(K, std::vector<int>(U, -1));
  std::vector<size_t> local_units(K, 0);
  for (size_t k = 0; k < K; ++k) {
    int next = 0;
    for (size_t i = 0; i < U; ++i)
      if (layer_sets[k][us[i].layer]) local[k][i] = next++;
    local_units[k] = static_cast<size_t>(next);
  }
  Evaluated ev;
  std::vector<std::vector<uint8_t>> forced(K);
  for (size_t k = 0; k < K; ++k) forced[k].assign(local_units[k], 0);
  auto held_of = [&](size_t k, const SiteSelection& sel) {
    std::vector<uint8_t> h(U, 0);
    for (size_t i = 0; i < U; ++i) {
      if (local[k][i] < 0) continue;
      const auto& x = sel.subnet.layers[us[i].layer];
      h[i] = (us[i].block ? x.ffn_blocks : x.heads)[us[i].idx];
    }
    return h;
  };
  for (size_t k = 0; k < K; ++k) {
    ev.sites.push_back(select_site(cm, sites[k], layer_sets[k], opt));
    ev.held.push_back(held_of(k, ev.sites.back()));
  }
  const int need = std::min<int>(opt.min_coverage, static_cast<int>(K));
  auto coverage = [&](size_t i) {
    int c = 0;
    for (size_t k = 0; k < K; ++k) c += ev.held[k][i];
    return c;
  };
  for (size_t i = 0; i < U; ++i) {
    while (coverage(i) < need) {
      int best = -1;
      double best_loss = 0;
      SiteSelection best_sel;
      std::vector<uint8_t> best_forced;
      for (size_t k = 0; k < K; ++k) {
        if (ev.held[k][i] || local[k][i] < 0) continue;
        // Keep what this site already contributes to thinly covered units.
        std::vector<uint8_t> f = forced[k];
        f[local[k][i]] = 1;
        for (size_t j = 0; j < U; ++j)
          if (ev.held[k][j] && coverage(j) <= need) f[local[k][j]] = 1;
        SiteSelection sel = select_site(cm, sites[k], layer_sets[k], opt, f);
        if (!sel.within_budget || !held_of(k, sel)[i]) continue;
        const double loss = ev.sites[k].value - sel.value;
        if (best < 0 || loss < best_loss) {
          best = static_cast<int>(k);
          best_loss = loss;
          best_sel = std::move(sel);
          best_forced = std::move(f);
        }
      }
      if (best < 0) break;  // the budgets do not allow it
      forced[best] = std::move(best_forced);
      ev.sites[best] = std::move(best_sel);
      ev.held[best] = held_of(static_cast<size_t>(best), ev.sites[best]);
    }
  }
  for (size_t i = 0; i < U; ++i) ev.uncovered += coverage(i) < need;
  for (const auto& s : ev.sites) ev.total += s.value;
  return ev;
}

// true iff a is a better objective than b (see select.h).
bool better(const Evaluated& a, const std::vector<uint8_t>& Sa, const Evaluated& b,
            const std::vector<uint8_t>& Sb) {
  if (a.uncovered != b.uncovered) return a.uncovered < b.uncovered;
  if (a.total != b.total) return a.total > b.total;
  return Sa < Sb;
}

// Searches the non-empty layer sets S of L layers: every one for L <= exhaustive_max, greedy +
// local search beyond. consider(S) evaluates S, makes it the best (bestS) when it is better, and
// says whether it did.
template <class Consider>
void search_layer_sets(int L, int exhaustive_max, std::vector<uint8_t>& bestS, Consider&& consider) {
  if (L <= exhaustive_max) {
    for (uint64_t m = 1; m < (1ULL << L); ++m) {
      std::vector<uint8_t> S(L);
      for (int l = 0; l < L; ++l) S[l] = (m >> l) & 1u;
      consider(S);
    }
  } else {
    // Greedy: start from the single best layer, add layers while the objective improves.
    for (int l = 0; l < L; ++l) {
      std::vector<uint8_t> S(L, 0);
      S[l] = 1;
      consider(S);
    }
    for (bool improved = true; improved;) {
      improved = false;
      std::vector<uint8_t> base = bestS;
      for (int l = 0; l < L; ++l) {
        if (base[l]) continue;
        std::vector<uint8_t> S = base;
        S[l] = 1;
        improved |= consider(S);
      }
    }
    // Local search: single add / remove / swap, first improvement, fixed order.
    std::vector<uint8_t> S, T;  // the candidate sets, reused across moves
    for (int iter = 0; iter < 4 * L * L; ++iter) {
      const std::vector<uint8_t> base = bestS;
      bool moved = false;
      for (int a = 0; a < L && !moved; ++a) {
        S = base;
        S[a] ^= 1;
        if (std::count(S.begin(), S.end(), 1) > 0) moved = consider(S);
        for (int b = 0; b < L && !moved; ++b) {
          if (base[a] == base[b] || !base[a]) continue;
          T = base;
          T[a] = 0;
          T[b] = 1;
          moved = consider(T);
        }
      }
      if (!moved) break;
    }
  }
}

}  // namespace

const char* trained_layers_name(TrainedLayers t) {
  return t == TrainedLayers::kPerSite ? "per_site" : "global";
}

StatusOr<TrainedLayers> parse_trained_layers(const std::string& name) {
  if (name == "global") return TrainedLayers::kGlobal;
  if (name == "per_site") return TrainedLayers::kPerSite;
  return InvalidArgument("hydra: trained_layers '" + name +
                         "' must be \"global\" (one trained layer set for all sites) or "
                         "\"per_site\" (each site chooses its own)");
}

Subnet cheapest_training_subnet(const CostModel& cm) {
  Subnet s;
  s.ffn_blocks = cm.ffn_blocks;
  const int L = cm.model.layers;
  for (int l = 0; l < L; ++l)
    s.layers.push_back({std::vector<uint8_t>(head_units(cm.model), 0),
                        std::vector<uint8_t>(cm.ffn_blocks, 0), l == L - 1});
  // A trained unit costs 3·a in any layer of S; with S = {top layer} no frozen layer runs a
  // backward pass and the removed layers below cost nothing.
  LayerSubnet& top = s.layers.back();
  if (cm.unit_cost(true, true, false) < cm.unit_cost(false, true, false))
    top.ffn_blocks[0] = 1;
  else
    top.heads[0] = 1;
  return s;
}

SiteSelection select_site(const CostModel& cm, const SiteInput& site, const std::vector<uint8_t>& S,
                          const SelectOptions& opt, const std::vector<uint8_t>& forced) {
  SiteSelection out;
  out.id = site.id;
  out.subnet.ffn_blocks = cm.ffn_blocks;
  int l0 = -1;
  for (int l = cm.model.layers - 1; l >= 0; --l)
    if (S[l]) l0 = l;
  for (int l = 0; l < cm.model.layers; ++l)
    out.subnet.layers.push_back({std::vector<uint8_t>(head_units(cm.model), 0),
                                 std::vector<uint8_t>(cm.ffn_blocks, 0), S[l] != 0});
  const int64_t cap = budget_flops_per_token(cm, site.budget);
  const int64_t fixed = cm.lm_fwd() + (l0 >= 0 ? cm.lm_fwd() : 0);
  // 2. frozen units: keep the most score (= least removal damage) within their share, exactly.
  const std::vector<Unit> fz = units_of(cm, S, false);
  auto fcost = [&](const Unit& u) { return cm.unit_cost(u.block, false, l0 >= 0 && u.layer > l0); };
  std::vector<KnapsackItem> fitems;
  for (const auto& u : fz) fitems.push_back({fcost(u), score(site.scores, u), false});
  const int64_t fz_cap =
      static_cast<int64_t>(std::floor((1.0 - opt.min_train_share) * static_cast<double>(cap))) -
      fixed;
  std::vector<uint8_t> fz_keep(fz.size(), 0);
  int64_t used = 0;
  if (fz_cap > 0) {
    const KnapsackResult fr = solve_knapsack(fitems, fz_cap);
    fz_keep = fr.take;
    used = fr.cost;
  }
  // 3. trained units Hₖ ⊆ units(S): exact knapsack on what is left. Taking a unit of S gains its
  // score and avoids the removal damage λ·score, hence value (1 + λ)·score.
  const std::vector<Unit> tu = units_of(cm, S, true);
  std::vector<KnapsackItem> items;
  for (size_t i = 0; i < tu.size(); ++i)
    items.push_back({cm.unit_cost(tu[i].block, true, false),
                     (1.0 + opt.removal_penalty) * score(site.scores, tu[i]),
                     i < forced.size() && forced[i] != 0});
  const int64_t left = cap - fixed - used;
  KnapsackResult kr = solve_knapsack(items, std::max<int64_t>(left, 0));
  if (left < 0 || !kr.feasible) {
    out.within_budget = false;
    kr.take.assign(items.size(), 0);
    kr.cost = 0;
  }
  // 4. what training left over goes back to the frozen units that did not fit their share.
  const int64_t rest = std::max<int64_t>(left, 0) - kr.cost;
  if (out.within_budget && rest > 0) {
    std::vector<KnapsackItem> more = fitems;
    for (size_t i = 0; i < fz.size(); ++i)
      if (fz_keep[i]) more[i].cost = 0, more[i].value = 0;  // already kept
    const KnapsackResult mr = solve_knapsack(more, rest);
    for (size_t i = 0; i < fz.size(); ++i) fz_keep[i] |= mr.take[i];
  }
  double removed = 0;
  for (size_t i = 0; i < fz.size(); ++i) {
    if (fz_keep[i])
      set_unit(out.subnet, fz[i]);
    else
      removed += score(site.scores, fz[i]);
  }
  for (size_t i = 0; i < tu.size(); ++i) {
    if (kr.take[i]) {
      set_unit(out.subnet, tu[i]);
      out.trained_value += score(site.scores, tu[i]);
    } else {
      removed += score(site.scores, tu[i]);
    }
  }
  out.removed_score = removed;
  out.value = out.trained_value - opt.removal_penalty * removed;
  out.cost_fraction = cost_fraction(cm, out.subnet);
  return out;
}

StatusOr<Selection> select_subnetworks(const CostModel& cm, std::vector<SiteInput> sites,
                                       const SelectOptions& opt) {
  ATOLL_RETURN_IF_ERROR(validate(cm.model));
  if (cm.ffn_blocks <= 0 || cm.model.ffn_hidden % cm.ffn_blocks != 0)
    return InvalidArgument("hydra: ffn_blocks must divide ffn_hidden");
  if (cm.model.moe_experts > 0)
    return InvalidArgument("hydra: subnetworks need dense FFNs; the model has MoE layers");
  if (sites.empty()) return InvalidArgument("hydra: no sites to select for");
  if (opt.min_coverage < 0) return InvalidArgument("hydra: min_coverage must be >= 0");
  if (!(opt.min_train_share >= 0 && opt.min_train_share <= 1))
    return InvalidArgument("hydra: min_train_share must be in [0, 1]");
  if (!(opt.removal_penalty >= 0 && opt.removal_penalty <= 100))
    return InvalidArgument("hydra: removal_penalty must be in [0, 100]");
  std::sort(sites.begin(), sites.end(),
            [](const SiteInput& a, const SiteInput& b) { return a.id < b.id; });
  for (size_t k = 0; k < sites.size(); ++k) {
    if (k && sites[k].id == sites[k - 1].id)
      return InvalidArgument("hydra: duplicate site id '" + sites[k].id + "'");
    if (!(sites[k].budget > 0 && sites[k].budget <= 1))
      return InvalidArgument("hydra: site '" + sites[k].id + "' budget " +
                             std::to_string(sites[k].budget) + " must be in (0, 1]");
    ATOLL_RETURN_IF_ERROR(validate(sites[k].scores, cm.model, cm.ffn_blocks));
  }
  const int L = cm.model.layers;
  Selection out;
  if (opt.trained_layers == TrainedLayers::kPerSite) {
    // Each site's own S_k: the largest value_k of its own subnetwork (no coverage term; coverage
    // is repaired within the chosen sets), ties to the smallest S_k.
    std::vector<std::vector<uint8_t>> sets;
    for (const SiteInput& site : sites) {
      std::vector<uint8_t> bestS;
      double best_value = 0;
      auto consider = [&](const std::vector<uint8_t>& S) {
        const double v = select_site(cm, site, S, opt).value;
        if (bestS.empty() || v > best_value || (v == best_value && S < bestS)) {
          best_value = v;
          bestS = S;
          return true;
        }
        return false;
      };
      search_layer_sets(L, opt.exhaustive_max_layers, bestS, consider);
      sets.push_back(std::move(bestS));
    }
    Evaluated ev = evaluate(cm, sites, sets, opt);
    out.layers.assign(L, 0);
    for (const auto& S : sets)
      for (int l = 0; l < L; ++l) out.layers[l] |= S[l];
    out.sites = std::move(ev.sites);
    out.total_value = ev.total;
    out.uncovered_units = ev.uncovered;
    return out;
  }
  std::vector<uint8_t> bestS;
  Evaluated best;
  auto consider = [&](const std::vector<uint8_t>& S) {
    Evaluated ev = evaluate(cm, sites, std::vector<std::vector<uint8_t>>(sites.size(), S), opt);
    if (bestS.empty() || better(ev, S, best, bestS)) {
      best = std::move(ev);
      bestS = S;
      return true;
    }
    return false;
  };
  search_layer_sets(L, opt.exhaustive_max_layers, bestS, consider);
  out.layers = bestS;
  out.sites = std::move(best.sites);
  out.total_value = best.total;
  out.uncovered_units = best.uncovered;
  return out;
}

}  // namespace atl::algorithms::hydra
