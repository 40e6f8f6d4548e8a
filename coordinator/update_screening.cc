#include "coordinator/update_screening.h"

#include <cstdio>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/privacy.h"

namespace atl::coordinator {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

ScreenOutcome screen_updates(PendingUpdates& updates, const algorithms::ScreenOptions& options) {
  std::vector<double> norms;
  norms.reserve(updates.size());
  for (const auto& [id, u] : updates) norms.push_back(algorithms::l2_norm(u.delta));
  const algorithms::ScreenDecision d = algorithms::screen_norms(norms, options);
  ScreenOutcome out;
  out.median_norm = d.median_norm;
  out.limit = d.limit;
  size_t i = 0;
  for (auto it = updates.begin(); it != updates.end(); ++i) {
    ScreenedUpdate s;
    s.norm = norms[i];
    s.action = d.actions[i];
    const std::string over =
        "norm " + fmt(s.norm) + " > limit " + fmt(d.limit) + " (median " + fmt(d.median_norm) + ")";
    if (s.action == algorithms::ScreenAction::kClipped) {
      s.why = "clipped: " + over;
      s.reason = "norm";
      algorithms::scale_values(it->second.delta, d.limit / s.norm);
    } else if (s.action == algorithms::ScreenAction::kDropped) {
      s.why = "dropped: " + over;
      s.reason = "norm";
    }
    out.by_node[it->first] = s;
    it = s.action == algorithms::ScreenAction::kDropped ? updates.erase(it) : std::next(it);
  }
  return out;
}

size_t clip_updates_for_privacy(PendingUpdates& updates, double clip_norm,
                                ScreenOutcome& screened) {
  size_t clipped = 0;
  for (auto& [id, u] : updates) {
    const double norm = algorithms::l2_norm(u.delta);
    if (!algorithms::clip_to_norm(u.delta, norm, clip_norm)) continue;
    ScreenedUpdate& s = screened.by_node[id];
    s.action = algorithms::ScreenAction::kClipped;
    s.why = "clipped: norm " + fmt(norm) + " > privacy.clip_norm " + fmt(clip_norm);
    s.reason = "privacy";
    ++clipped;
  }
  return clipped;
}

StatusOr<StepOutcome> apply_finite_step(const RoundStrategy& strategy, uint64_t round,
                                        PendingUpdates& updates, bool has_momentum,
                                        const std::vector<float>& theta_r,
                                        const std::vector<float>& momentum_r,
                                        std::vector<float>& theta_next,
                                        std::vector<float>& momentum_next) {
  StepOutcome out;
  for (;;) {
    theta_next = theta_r;
    momentum_next = momentum_r;
    if (updates.empty()) {
      out.skipped = true;
      return out;
    }
    ATOLL_RETURN_IF_ERROR(strategy.apply(round, updates, has_momentum, theta_next, momentum_next));
    if (algorithms::all_finite(theta_next) && algorithms::all_finite(momentum_next)) return out;
    // Leave out the update with the largest norm (the first in node order on a tie) and step
    // again from θ_r.
    auto worst = updates.begin();
    double worst_norm = -1.0;
    for (auto it = updates.begin(); it != updates.end(); ++it) {
      const double n = algorithms::l2_norm(it->second.delta);
      if (n > worst_norm) worst_norm = n, worst = it;
    }
    out.dropped_nonfinite.push_back(worst->first);
    updates.erase(worst);
  }
}

}  // namespace atl::coordinator
