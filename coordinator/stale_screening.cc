// Stale-update detection in the commit's screening (update_screening.h): each update's count
// sketch against the previous round's applied updates and this round's other updates.
#include <cmath>
#include <cstdio>
#include <map>

#include "algorithms/diloco/replay.h"
#include "algorithms/diloco/robust.h"
#include "coordinator/update_screening.h"

namespace atl::coordinator {

namespace {

// acc += S/‖S‖ (kReplaySketchBuckets values each); a zero sketch adds nothing. Returns whether
// it added a term.
bool add_unit(std::vector<double>& acc, const std::vector<double>& sketch) {
  double squares = 0.0;
  for (double v : sketch) squares += v * v;
  if (!(squares > 0.0) || !std::isfinite(squares)) return false;
  const double inverse_norm = 1.0 / std::sqrt(squares);
  for (size_t b = 0; b < acc.size(); ++b) acc[b] += sketch[b] * inverse_norm;
  return true;
}

std::string figure_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

}  // namespace

std::map<std::string, StaleFigures> stale_figures(const PendingUpdates& updates,
                                                  const ReplayMemory& sketched,
                                                  const ScreeningMemory& memory) {
  std::map<std::string, StaleFigures> figures;
  for (const auto& update : updates) {
    const std::string& id = update.first;
    auto own = sketched.find(id);
    if (own == sketched.end()) continue;
    const ReplayEntry& mine = own->second;
    std::vector<double> previous(algorithms::kReplaySketchBuckets, 0.0);
    std::vector<double> current(algorithms::kReplaySketchBuckets, 0.0);
    bool has_previous = false, has_current = false;
    for (const std::string& other : memory.applied_last_round) {
      if (other == id) continue;
      auto e = memory.replay.find(other);
      if (e == memory.replay.end() || e->second.layout != mine.layout) continue;
      has_previous |= add_unit(previous, e->second.sketch);
    }
    for (const auto& other : updates) {
      if (other.first == id) continue;
      auto e = sketched.find(other.first);
      if (e == sketched.end() || e->second.layout != mine.layout) continue;
      has_current |= add_unit(current, e->second.sketch);
    }
    if (!has_previous || !has_current) continue;
    figures[id] = StaleFigures{algorithms::sketch_cosine(mine.sketch, previous),
                               algorithms::sketch_cosine(mine.sketch, current)};
  }
  return figures;
}

StaleBaseline stale_baseline(const std::vector<std::vector<SiteFigure>>& history) {
  std::map<std::string, std::vector<double>> by_node;
  for (const auto& round : history)
    for (const SiteFigure& f : round) by_node[f.node_id].push_back(f.figure);
  StaleBaseline b;
  b.sites = by_node.size();
  if (by_node.empty()) return b;
  std::vector<double> centres;
  for (const auto& [id, figures] : by_node) centres.push_back(algorithms::lower_median_of(figures));
  b.median = algorithms::lower_median_of(std::move(centres));
  std::vector<double> deviations;
  for (const auto& [id, figures] : by_node) {
    std::vector<double> own;
    for (double f : figures) own.push_back(std::fabs(f - b.median));
    deviations.push_back(algorithms::lower_median_of(std::move(own)));
  }
  // 1.4826: the median absolute deviation of a normal distribution is 0.6745 σ.
  b.spread = 1.4826 * algorithms::lower_median_of(std::move(deviations));
  return b;
}

StaleScreen screen_stale(PendingUpdates& updates, const ReplayMemory& sketched,
                         const ScreeningMemory& memory, double margin, ScreenOutcome& screened) {
  StaleScreen out;
  if (!(margin > 0)) return out;
  // With fewer than kStaleMinSites updates, "this round's other updates" is one site's update,
  // and one honest update is no measure of the round's direction: honest LoRA pairs, whose
  // consecutive updates are much alike, were dropped (3 of 12 in a 2-site run, one round
  // skipped). A stale site is then also half the sites, beyond what any screening can outvote.
  if (updates.size() < kStaleMinSites) return out;
  const StaleBaseline baseline = stale_baseline(memory.stale_history);
  const bool judged_by_history = baseline.sites >= kStaleMinSites;
  const double outlier_from = baseline.median + kStaleOutlierZ * baseline.spread;
  for (const auto& [id, f] : stale_figures(updates, sketched, memory)) {
    const double figure = f.previous - f.current;
    if (!(figure >= margin) || (judged_by_history && !(figure >= outlier_from))) {
      out.kept_figures.push_back({id, figure});
      continue;
    }
    auto it = updates.find(id);
    // The norm screening recorded every update with its norm as received; a clip does not
    // change the cosines (the sketches were taken before it).
    auto [entry, first] = screened.by_node.try_emplace(id);
    ScreenedUpdate& s = entry->second;
    if (first) s.norm = algorithms::l2_norm(it->second.delta);
    s.action = algorithms::ScreenAction::kDropped;
    s.reason = "stale";
    s.why = "dropped: stale: cosine " + figure_text(f.previous) +
            " to the previous round's other updates - cosine " + figure_text(f.current) +
            " to this round's other updates >= robust.stale_margin " + figure_text(margin);
    if (judged_by_history)
      s.why += " and >= " + figure_text(outlier_from) + " (the median " +
               figure_text(baseline.median) + " + " + figure_text(kStaleOutlierZ) +
               " robust s.d. " + figure_text(baseline.spread) + " of the kept figures of " +
               std::to_string(baseline.sites) + " nodes over the last " +
               std::to_string(memory.stale_history.size()) + " rounds)";
    updates.erase(it);
    ++out.dropped;
  }
  return out;
}

std::vector<std::vector<SiteFigure>> extend_stale_history(
    std::vector<std::vector<SiteFigure>> history, std::vector<SiteFigure> kept_figures) {
  history.push_back(std::move(kept_figures));
  if (history.size() > kStaleHistoryRounds)
    history.erase(history.begin(), history.end() - kStaleHistoryRounds);
  return history;
}

}  // namespace atl::coordinator
