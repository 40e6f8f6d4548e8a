// Stale-update detection in the commit's screening (update_screening.h): each update's count
// sketch against the previous round's applied updates and this round's other updates.
#include <cmath>
#include <cstdio>

#include "algorithms/diloco/replay.h"
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

size_t screen_stale(PendingUpdates& updates, const ReplayMemory& sketched,
                    const ScreeningMemory& memory, double margin, ScreenOutcome& screened) {
  if (!(margin > 0)) return 0;
  size_t dropped = 0;
  for (const auto& [id, f] : stale_figures(updates, sketched, memory)) {
    if (!(f.previous - f.current >= margin)) continue;
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
    updates.erase(it);
    ++dropped;
  }
  return dropped;
}

}  // namespace atl::coordinator
