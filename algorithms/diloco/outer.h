// DiLoCo outer step (DESIGN.md, "DiLoCo outer step"): pure math over flat fp32 buffers.
//
// Round r: every node i starts from θ, runs H inner steps and sends the pseudo-gradient
// Δᵢ = θ − θᵢ (numel fp32). The coordinator averages them weighted by tokens,
//   Δ = Σ wᵢΔᵢ / Σ wᵢ        (wᵢ = tokens node i processed in the round)
// and applies PyTorch's SGD(nesterov=True, dampening=0) with Δ as the gradient:
//   m ← μm + Δ               (first step: m ← Δ, PyTorch's buffer initialisation)
//   θ ← θ − η(Δ + μm)
// Without the look-ahead (diloco.final_look_ahead = false, the last round): m as above, and
//   θ ← θ − ηΔ
// so the final θ is not extrapolated along the momentum (with η = 1: the sites' mean θ).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

// One node's contribution to a round. `delta` is a non-owning view (numel fp32).
struct Update {
  std::string node_id;
  uint64_t tokens = 0;  // aggregation weight, > 0
  std::span<const float> delta;
};

// out (numel) ← Σ wᵢΔᵢ / Σ wᵢ. `updates` must be sorted by node_id, strictly ascending (no
// duplicates): the sum is accumulated per element in double, in that order, so the result is
// bitwise identical whatever order the updates arrived in. Every Δᵢ must have out.size()
// elements and tokens > 0. Values are not checked for finiteness here (see check_finite).
Status aggregate_pseudo_gradients(const std::vector<Update>& sorted_by_node_id,
                                  std::span<float> out);

struct OuterNesterovOptions {
  float lr = 0.7f;        // η
  float momentum = 0.9f;  // μ, in [0, 1)
};

// One element of the outer Nesterov step, in the fp32 operation order of
// torch.optim.SGD(nesterov=True):
//   buf.mul_(μ).add_(d_p); d_p = d_p.add(buf, alpha=μ); p.add_(d_p, alpha=-lr)
// Shared by OuterNesterov::step and Hydra's masked step (algorithms/hydra/aggregate.h), so both
// round identically. look_ahead = false: the buffer is updated the same way, θ moves by −lr·d.
inline void outer_nesterov_element(float& theta, float& momentum, float d, float mu, float lr,
                                   bool first_step, bool look_ahead = true) {
  float m;
  if (first_step) {
    m = d;
  } else {
    const float decayed = mu * momentum;
    m = decayed + d;
  }
  momentum = m;
  if (!look_ahead) {
    const float step = -lr * d;
    theta = theta + step;
    return;
  }
  const float look = mu * m;
  const float u = d + look;
  const float step = -lr * u;
  theta = theta + step;
}

// PyTorch SGD(nesterov=True, dampening=0, weight_decay=0), fp32 arithmetic in PyTorch's
// operation order. Stateless: the momentum buffer belongs to the caller (the coordinator
// persists it with θ in one atomic commit).
class OuterNesterov {
 public:
  explicit OuterNesterov(OuterNesterovOptions options = {}) : options_(options) {}
  const OuterNesterovOptions& options() const { return options_; }

  // theta, momentum, delta: numel each. first_step: the momentum buffer does not exist yet
  // and is initialised to Δ (PyTorch: buf = clone(d_p)), which also keeps the sign of −0.
  // look_ahead = false: θ ← θ − ηΔ (the buffer updated as always); see the file comment.
  Status step(std::span<float> theta, std::span<float> momentum, std::span<const float> delta,
              bool first_step, bool look_ahead = true) const;

 private:
  OuterNesterovOptions options_;
};

// OK iff every value is finite; otherwise INVALID_ARGUMENT naming `what`, the first bad index
// and its value, e.g. "update: element 17 is nan (all values must be finite)".
Status check_finite(std::span<const float> values, const std::string& what);
bool all_finite(std::span<const float> values);

// SHA-256 (hex) of a layout's names and shapes, in order: two sides agree on the meaning of a
// flat buffer iff their layout fingerprints are equal.
std::string layout_fingerprint(const ParamLayout& layout);
// SHA-256 (hex) of the raw little-endian fp32 bytes; equals ParamSet::fingerprint().
std::string params_fingerprint(std::span<const float> values);

}  // namespace atl::algorithms
