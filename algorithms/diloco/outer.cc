#include "algorithms/diloco/outer.h"

#include <cmath>
#include <cstdio>

#include "kernels/core/sha256.h"

namespace atl::algorithms {

Status aggregate_pseudo_gradients(const std::vector<Update>& updates, std::span<float> out) {
  if (updates.empty()) return InvalidArgument("aggregate: no updates");
  double total = 0.0;
  for (size_t i = 0; i < updates.size(); ++i) {
    const Update& u = updates[i];
    if (u.delta.size() != out.size())
      return InvalidArgument("aggregate: update from " + u.node_id + " has " +
                             std::to_string(u.delta.size()) + " elements, expected " +
                             std::to_string(out.size()));
    if (u.tokens == 0)
      return InvalidArgument("aggregate: update from " + u.node_id + " has 0 tokens");
    if (i > 0 && !(updates[i - 1].node_id < u.node_id))
      return InvalidArgument("aggregate: updates must be sorted by node id without duplicates (" +
                             updates[i - 1].node_id + " before " + u.node_id + ")");
    total += static_cast<double>(u.tokens);
  }
  // Each element is an independent, fixed-order double sum: parallelising over elements keeps
  // the result bitwise deterministic (no cross-element reduction).
  const size_t n = out.size();
  const size_t k = updates.size();
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t j = 0; j < n; ++j) {
    double acc = 0.0;
    for (size_t i = 0; i < k; ++i)
      acc += static_cast<double>(updates[i].tokens) * static_cast<double>(updates[i].delta[j]);
    out[j] = static_cast<float>(acc / total);
  }
  return Status::Ok();
}

Status OuterNesterov::step(std::span<float> theta, std::span<float> momentum,
                           std::span<const float> delta, bool first_step, bool look_ahead) const {
  if (theta.size() != delta.size() || momentum.size() != delta.size())
    return InvalidArgument("outer step: theta/momentum/delta sizes differ (" +
                           std::to_string(theta.size()) + "/" + std::to_string(momentum.size()) +
                           "/" + std::to_string(delta.size()) + ")");
  const float mu = options_.momentum;
  const float lr = options_.lr;
  const size_t n = delta.size();
  // Same fp32 operation order as torch.optim.SGD(nesterov=True):
  //   buf.mul_(μ).add_(d_p); d_p = d_p.add(buf, alpha=μ); p.add_(d_p, alpha=-lr)
  // Separate statements so each product and sum is rounded to fp32 (no contraction).
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t j = 0; j < n; ++j)
    outer_nesterov_element(theta[j], momentum[j], delta[j], mu, lr, first_step, look_ahead);
  return Status::Ok();
}

bool all_finite(std::span<const float> values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

Status check_finite(std::span<const float> values, const std::string& what) {
  for (size_t j = 0; j < values.size(); ++j) {
    if (!std::isfinite(values[j])) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(values[j]));
      return InvalidArgument(what + ": element " + std::to_string(j) + " is " + buf +
                             " (all values must be finite)");
    }
  }
  return Status::Ok();
}

std::string layout_fingerprint(const ParamLayout& layout) {
  const std::string d = layout.describe();
  return sha256_hex(d.data(), d.size());
}

std::string params_fingerprint(std::span<const float> values) {
  return sha256_hex(values.data(), values.size() * sizeof(float));
}

}  // namespace atl::algorithms
