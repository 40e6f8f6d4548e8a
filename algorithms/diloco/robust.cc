#include "algorithms/diloco/robust.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace atl::algorithms {

namespace {

// A total order on finite floats: by value, −0 before +0, so that a sorted column is the same
// sequence of bits whatever order its values arrived in.
bool value_before(float a, float b) {
  if (a < b) return true;
  if (b < a) return false;
  return std::signbit(a) && !std::signbit(b);
}

Status check_updates(const std::vector<Update>& updates, size_t numel, const char* what) {
  if (updates.empty()) return InvalidArgument(std::string(what) + ": no updates");
  for (size_t i = 0; i < updates.size(); ++i) {
    const Update& u = updates[i];
    if (u.delta.size() != numel)
      return InvalidArgument(std::string(what) + ": update from " + u.node_id + " has " +
                             std::to_string(u.delta.size()) + " elements, expected " +
                             std::to_string(numel));
    if (u.tokens == 0)
      return InvalidArgument(std::string(what) + ": update from " + u.node_id + " has 0 tokens");
    if (i > 0 && !(updates[i - 1].node_id < u.node_id))
      return InvalidArgument(std::string(what) +
                             ": updates must be sorted by node id without duplicates (" +
                             updates[i - 1].node_id + " before " + u.node_id + ")");
  }
  return Status::Ok();
}

// out[j] ← rule(column j) for every element, columns gathered in node-id order.
template <typename Rule>
void coordinate_wise(const std::vector<Update>& updates, std::span<float> out, Rule rule) {
  const size_t n = out.size();
  const size_t k = updates.size();
#pragma omp parallel if (n > (1u << 16))
  {
    std::vector<float> column(k);
#pragma omp for schedule(static)
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < k; ++i) column[i] = updates[i].delta[j];
      out[j] = rule(std::span<float>(column));
    }
  }
}

// Σ wᵢ·sᵢ·Δᵢ / Σ wᵢ with per-update scales sᵢ (double, per element in update order).
void scaled_weighted_mean(const std::vector<Update>& updates, const std::vector<double>& scale,
                          std::span<float> out) {
  double total = 0.0;
  for (const Update& u : updates) total += static_cast<double>(u.tokens);
  const size_t n = out.size();
  const size_t k = updates.size();
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t j = 0; j < n; ++j) {
    double acc = 0.0;
    for (size_t i = 0; i < k; ++i)
      acc += static_cast<double>(updates[i].tokens) *
             (scale[i] * static_cast<double>(updates[i].delta[j]));
    out[j] = static_cast<float>(acc / total);
  }
}

double squared_distance(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (size_t j = 0; j < a.size(); ++j) {
    const double d = static_cast<double>(a[j]) - static_cast<double>(b[j]);
    s += d * d;
  }
  return s;
}

// Krum / Multi-Krum (Blanchard et al., 2017): see robust.h.
Status krum(const std::vector<Update>& updates, const AggregatorOptions& o, std::span<float> out) {
  const size_t k = updates.size();
  std::vector<double> dist(k * k, 0.0);
  const size_t pairs = k * (k - 1) / 2;
  std::vector<std::pair<size_t, size_t>> pair_list;
  pair_list.reserve(pairs);
  for (size_t a = 0; a < k; ++a)
    for (size_t b = a + 1; b < k; ++b) pair_list.emplace_back(a, b);
#pragma omp parallel for schedule(dynamic)
  for (size_t p = 0; p < pair_list.size(); ++p) {
    const auto [a, b] = pair_list[p];
    const double d = squared_distance(updates[a].delta, updates[b].delta);
    dist[a * k + b] = d;
    dist[b * k + a] = d;
  }
  // Neighbours scored: k − f − 2, at least 1, at most the k − 1 others.
  const int64_t wanted = static_cast<int64_t>(k) - static_cast<int64_t>(o.krum_byzantine) - 2;
  const size_t closest = std::min<size_t>(k - 1, static_cast<size_t>(std::max<int64_t>(1, wanted)));
  std::vector<double> score(k, 0.0);
  for (size_t i = 0; i < k; ++i) {
    std::vector<double> others;
    for (size_t j = 0; j < k; ++j)
      if (j != i) others.push_back(dist[i * k + j]);
    std::sort(others.begin(), others.end());
    for (size_t c = 0; c < closest; ++c) score[i] += others[c];
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t{0});
  // Stable on the node-id order: equal scores keep the lower node id first.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score[a] < score[b]; });
  const size_t keep = std::clamp<size_t>(o.krum_keep, 1, k);
  if (keep == 1) {
    std::copy(updates[order[0]].delta.begin(), updates[order[0]].delta.end(), out.begin());
    return Status::Ok();
  }
  std::vector<size_t> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
  std::sort(chosen.begin(), chosen.end());  // back to node-id order for the sum
  std::vector<Update> best;
  for (size_t i : chosen) best.push_back(updates[i]);
  return aggregate_pseudo_gradients(best, out);
}

}  // namespace

const char* aggregator_name(AggregatorKind kind) {
  switch (kind) {
    case AggregatorKind::kMean:
      return "mean";
    case AggregatorKind::kClippedMean:
      return "clipped-mean";
    case AggregatorKind::kTrimmedMean:
      return "trimmed-mean";
    case AggregatorKind::kMedian:
      return "median";
    case AggregatorKind::kKrum:
      return "krum";
  }
  return "unknown";
}

StatusOr<AggregatorKind> parse_aggregator(const std::string& name) {
  for (AggregatorKind k :
       {AggregatorKind::kMean, AggregatorKind::kClippedMean, AggregatorKind::kTrimmedMean,
        AggregatorKind::kMedian, AggregatorKind::kKrum})
    if (name == aggregator_name(k)) return k;
  return InvalidArgument("unknown aggregator \"" + name.substr(0, 64) +
                         "\" (mean, clipped-mean, trimmed-mean, median, krum)");
}

const char* screen_mode_name(ScreenMode mode) {
  switch (mode) {
    case ScreenMode::kOff:
      return "off";
    case ScreenMode::kClip:
      return "clip";
    case ScreenMode::kDrop:
      return "drop";
  }
  return "unknown";
}

StatusOr<ScreenMode> parse_screen_mode(const std::string& name) {
  for (ScreenMode m : {ScreenMode::kOff, ScreenMode::kClip, ScreenMode::kDrop})
    if (name == screen_mode_name(m)) return m;
  return InvalidArgument("unknown screening mode \"" + name.substr(0, 64) + "\" (clip, drop, off)");
}

const char* screen_action_name(ScreenAction action) {
  switch (action) {
    case ScreenAction::kKept:
      return "kept";
    case ScreenAction::kClipped:
      return "clipped";
    case ScreenAction::kDropped:
      return "dropped";
  }
  return "unknown";
}

double l2_norm(std::span<const float> v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(s);
}

double lower_median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

double reference_norm(const std::vector<double>& norms) {
  // Zero updates (a Hydra site whose subnetwork got no gradient, a node with nothing to add)
  // say nothing about the round's scale and cannot be too large: they are left out, so that
  // they cannot pull the limit down to 0.
  std::vector<double> scale;
  for (double n : norms)
    if (n > 0 && std::isfinite(n)) scale.push_back(n);
  return lower_median_of(std::move(scale));
}

ScreenDecision screen_norms(const std::vector<double>& norms, const ScreenOptions& o) {
  ScreenDecision d;
  d.median_norm = reference_norm(norms);
  d.actions.assign(norms.size(), ScreenAction::kKept);
  d.limit = std::numeric_limits<double>::infinity();
  if (o.mode == ScreenMode::kOff) return d;
  d.limit = o.norm_multiple * d.median_norm;
  if (o.max_norm > 0) d.limit = std::min(d.limit, o.max_norm);
  for (size_t i = 0; i < norms.size(); ++i) {
    // A non-finite norm cannot come from finite fp32 values; it is dropped either way.
    if (!std::isfinite(norms[i])) {
      d.actions[i] = ScreenAction::kDropped;
    } else if (norms[i] > d.limit) {
      d.actions[i] = o.mode == ScreenMode::kClip && d.limit > 0 ? ScreenAction::kClipped
                                                                : ScreenAction::kDropped;
    }
  }
  return d;
}

void scale_values(std::span<float> v, double factor) {
  for (float& x : v) x = static_cast<float>(static_cast<double>(x) * factor);
}

float trimmed_mean_of(std::span<float> column, double trim_fraction) {
  std::sort(column.begin(), column.end(), value_before);
  const size_t k = column.size();
  size_t cut = static_cast<size_t>(std::floor(trim_fraction * static_cast<double>(k)));
  if (2 * cut >= k) cut = (k - 1) / 2;  // keep at least one value
  double s = 0.0;
  for (size_t i = cut; i < k - cut; ++i) s += static_cast<double>(column[i]);
  return static_cast<float>(s / static_cast<double>(k - 2 * cut));
}

float median_value_of(std::span<float> column) {
  std::sort(column.begin(), column.end(), value_before);
  const size_t k = column.size();
  if (k % 2 == 1) return column[k / 2];
  return static_cast<float>(
      (static_cast<double>(column[k / 2 - 1]) + static_cast<double>(column[k / 2])) / 2.0);
}

Status aggregate_robust(const std::vector<Update>& updates, const AggregatorOptions& o,
                        std::span<float> out) {
  ATOLL_RETURN_IF_ERROR(check_updates(updates, out.size(), "aggregate"));
  switch (o.kind) {
    case AggregatorKind::kMean:
      return aggregate_pseudo_gradients(updates, out);
    case AggregatorKind::kClippedMean: {
      std::vector<double> norms;
      for (const Update& u : updates) norms.push_back(l2_norm(u.delta));
      const double limit = o.clip_multiple * reference_norm(norms);
      std::vector<double> scale(updates.size(), 1.0);
      for (size_t i = 0; i < updates.size(); ++i)
        if (norms[i] > limit) scale[i] = limit / norms[i];
      scaled_weighted_mean(updates, scale, out);
      return Status::Ok();
    }
    case AggregatorKind::kTrimmedMean: {
      if (!(o.trim_fraction >= 0 && o.trim_fraction < 0.5))
        return InvalidArgument("aggregate: trim fraction " + std::to_string(o.trim_fraction) +
                               " must be in [0, 0.5)");
      const double beta = o.trim_fraction;
      coordinate_wise(updates, out,
                      [beta](std::span<float> c) { return trimmed_mean_of(c, beta); });
      return Status::Ok();
    }
    case AggregatorKind::kMedian:
      coordinate_wise(updates, out, [](std::span<float> c) { return median_value_of(c); });
      return Status::Ok();
    case AggregatorKind::kKrum:
      return krum(updates, o, out);
  }
  return InvalidArgument("aggregate: unknown aggregator");
}

}  // namespace atl::algorithms
