#include "algorithms/hydra/aggregate.h"

#include <cmath>
#include <vector>

namespace atl::algorithms::hydra {

Status check_masked_update(const MaskedUpdate& u, size_t numel) {
  if (u.indices.size() != u.values.size())
    return InvalidArgument("masked update from " + u.node_id + ": " +
                           std::to_string(u.indices.size()) + " indices but " +
                           std::to_string(u.values.size()) + " values");
  if (u.tokens == 0) return InvalidArgument("masked update from " + u.node_id + " has 0 tokens");
  if (!(u.forward_share > 0 && u.forward_share <= 1))
    return InvalidArgument("masked update from " + u.node_id + ": forward share " +
                           std::to_string(u.forward_share) + " is not in (0, 1]");
  for (size_t i = 0; i < u.indices.size(); ++i) {
    if (u.indices[i] >= numel || (i && u.indices[i] <= u.indices[i - 1]))
      return InvalidArgument("masked update from " + u.node_id + ": index " +
                             std::to_string(u.indices[i]) + " at " + std::to_string(i) +
                             " is out of range or not ascending");
    if (!std::isfinite(u.values[i]))
      return InvalidArgument("masked update from " + u.node_id + ": value at index " +
                             std::to_string(u.indices[i]) + " is not finite");
  }
  return Status::Ok();
}

namespace {

// The updates of one masked aggregation: at least one, each well-formed for n elements, sorted
// by node id without duplicates; `held_size` must equal n.
Status check_masked_updates(const std::vector<MaskedUpdate>& updates, size_t n, size_t held_size,
                            double forward_share_power = 0.0) {
  if (updates.empty()) return InvalidArgument("masked aggregate: no updates");
  if (!(forward_share_power >= 0 && forward_share_power <= kMaxForwardSharePower))
    return InvalidArgument("masked aggregate: forward share power " +
                           std::to_string(forward_share_power) + " is not in [0, 8]");
  if (held_size != n) return InvalidArgument("masked aggregate: size mismatch");
  for (size_t i = 0; i < updates.size(); ++i) {
    ATOLL_RETURN_IF_ERROR(check_masked_update(updates[i], n));
    if (i > 0 && !(updates[i - 1].node_id < updates[i].node_id))
      return InvalidArgument(
          "masked aggregate: updates must be sorted by node id without "
          "duplicates (" +
          updates[i - 1].node_id + " before " + updates[i].node_id + ")");
  }
  return Status::Ok();
}

}  // namespace

double aggregation_weight(const MaskedUpdate& u, double forward_share_power) {
  // std::pow(φ, 0) is exactly 1, so p = 0 keeps αₖ = tokens bit for bit.
  return static_cast<double>(u.tokens) * std::pow(u.forward_share, forward_share_power);
}

Status aggregate_masked(const std::vector<MaskedUpdate>& updates, std::span<float> delta,
                        std::span<uint32_t> held, double forward_share_power) {
  ATOLL_RETURN_IF_ERROR(
      check_masked_updates(updates, delta.size(), held.size(), forward_share_power));
  const size_t n = delta.size();
  // Per element numerator and denominator in double, sites visited in node-id order.
  std::vector<double> num(n, 0.0), den(n, 0.0);
  for (const auto& u : updates) {
    const double a = aggregation_weight(u, forward_share_power);
    for (size_t i = 0; i < u.indices.size(); ++i) {
      num[u.indices[i]] += a * static_cast<double>(u.values[i]);
      den[u.indices[i]] += a;
    }
  }
  std::fill(held.begin(), held.end(), 0u);
  for (const auto& u : updates)
    for (uint32_t j : u.indices) ++held[j];
  for (size_t j = 0; j < n; ++j) delta[j] = held[j] ? static_cast<float>(num[j] / den[j]) : 0.0f;
  return Status::Ok();
}

Status aggregate_masked_robust(const std::vector<MaskedUpdate>& updates, const AggregatorOptions& o,
                               std::span<float> delta, std::span<uint32_t> held,
                               double forward_share_power) {
  switch (o.kind) {
    case AggregatorKind::kMean:
      return aggregate_masked(updates, delta, held, forward_share_power);
    case AggregatorKind::kKrum:
      return InvalidArgument(
          "masked aggregate: krum compares whole updates, but Hydra's sites train different "
          "elements; use median or trimmed-mean");
    case AggregatorKind::kClippedMean: {
      std::vector<double> norms;
      for (const auto& u : updates) norms.push_back(l2_norm(u.values));
      const double limit = o.clip_multiple * reference_norm(norms);
      std::vector<std::vector<float>> scaled(updates.size());
      std::vector<MaskedUpdate> views = updates;
      for (size_t i = 0; i < updates.size(); ++i) {
        if (!(norms[i] > limit)) continue;
        scaled[i].assign(updates[i].values.begin(), updates[i].values.end());
        scale_values(scaled[i], limit / norms[i]);
        views[i].values = scaled[i];
      }
      return aggregate_masked(views, delta, held, forward_share_power);
    }
    case AggregatorKind::kTrimmedMean:
    case AggregatorKind::kMedian:
      break;
  }
  if (!(o.trim_fraction >= 0 && o.trim_fraction < 0.5))
    return InvalidArgument("masked aggregate: trim fraction must be in [0, 0.5)");
  ATOLL_RETURN_IF_ERROR(check_masked_updates(updates, delta.size(), held.size()));
  const size_t n = delta.size();
  // Per element, the values of the sites holding it: one cursor per site walks its ascending
  // indices, so the columns are gathered in one pass over θ.
  std::vector<size_t> cursor(updates.size(), 0);
  std::vector<float> column;
  column.reserve(updates.size());
  for (size_t j = 0; j < n; ++j) {
    column.clear();
    for (size_t i = 0; i < updates.size(); ++i) {
      const MaskedUpdate& u = updates[i];
      if (cursor[i] < u.indices.size() && u.indices[cursor[i]] == j)
        column.push_back(u.values[cursor[i]++]);
    }
    held[j] = static_cast<uint32_t>(column.size());
    if (column.empty()) {
      delta[j] = 0.0f;
    } else if (o.kind == AggregatorKind::kMedian) {
      delta[j] = median_value_of(column);
    } else {
      delta[j] = trimmed_mean_of(column, o.trim_fraction);
    }
  }
  return Status::Ok();
}

Status masked_outer_step(const OuterNesterovOptions& opt, std::span<float> theta,
                         std::span<float> momentum, std::span<const float> delta,
                         std::span<const uint32_t> held, bool first_step, bool look_ahead) {
  const size_t n = delta.size();
  if (theta.size() != n || momentum.size() != n || held.size() != n)
    return InvalidArgument("masked outer step: theta/momentum/delta/held sizes differ");
  const float mu = opt.momentum, lr = opt.lr;
  for (size_t j = 0; j < n; ++j)
    if (held[j])
      outer_nesterov_element(theta[j], momentum[j], delta[j], mu, lr, first_step, look_ahead);
  return Status::Ok();
}

}  // namespace atl::algorithms::hydra
