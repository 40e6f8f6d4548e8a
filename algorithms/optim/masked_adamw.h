// AdamW over a subset of a ParamSet's elements (a Hydra subnetwork's trained elements): the
// moments m and v exist only for those elements ((n) each, n = number of indices), so optimizer
// memory scales with the subnetwork, not the model. Same update kernel and decay rule as AdamW
// (adamw.h): an element decays iff its view has >= 2 dimensions. Untouched elements keep their
// values bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/model/param_set.h"
#include "algorithms/optim/adamw.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

class MaskedAdamW {
 public:
  MaskedAdamW() = default;
  // indices: ascending, distinct, < layout.numel().
  MaskedAdamW(const ParamLayout& layout, std::vector<uint32_t> indices, const AdamWConfig& cfg);

  // One update of the held elements; grads has the full layout (only held entries are read).
  void step(ParamSet& params, const ParamSet& grads, double lr);
  const std::vector<uint32_t>& indices() const { return idx_; }
  int64_t step_count() const { return step_; }
  // Bytes of optimizer state (m and v).
  size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }
  // The moments, one value per held element in the order of indices() (decaying first), and
  // their replacement from a saved copy (a node's round state on disk): InvalidArgument when a
  // size is not the held element count.
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  Status set_moments(int64_t steps, std::vector<float> m, std::vector<float> v);

 private:
  AdamWConfig cfg_;
  std::vector<uint32_t> idx_;  // held elements, decaying ones first (then non-decaying)
  size_t n_decay_ = 0;         // idx_[0, n_decay_) decay
  std::vector<float> m_, v_, p_, g_;
  int64_t step_ = 0;
};

}  // namespace atl::algorithms
