// Inputs on which int8/int4 block codes depend on FMA contraction: blocks with amax 3 (so
// inv = qmax / 3 is inexact) whose other 31 values x have x·inv within rounding of a tie k + 1/2.
// Round-to-nearest of fl(x·inv) and of the exact x·inv (one FMA) then differ.
#pragma once

#include <cmath>
#include <vector>

namespace atl::kernels::cuda::testing {

// Appends such blocks (32 values each, block-aligned when out.size() % 32 == 0) for qmax 127
// and 7; returns how many sensitive values were added.
inline int append_fma_sensitive_blocks(std::vector<float>& out) {
  constexpr float kMagic = 12582912.0f, kAmax = 3.0f;
  int added = 0;
  for (float qmax : {127.0f, 7.0f}) {
    volatile float inv_v = qmax / kAmax;  // as the encoders compute it
    const float inv = inv_v;
    std::vector<float> vals;
    for (int k = 0; k < int(qmax) && vals.size() < 62; ++k) {
      for (int d = -3; d <= 3; ++d) {
        float c = (float(k) + 0.5f) / inv;
        for (int s = 0; s < std::abs(d); ++s) c = std::nextafter(c, d > 0 ? 10.0f : -10.0f);
        volatile float p = c * inv;  // rounded product
        const float separate = (p + kMagic) - kMagic;
        const float fused = std::fma(c, inv, kMagic) - kMagic;
        if (separate != fused && c < kAmax) vals.push_back(c);
      }
    }
    for (size_t i = 0; i < vals.size(); i += 31) {
      out.push_back(kAmax);
      for (size_t j = i; j < i + 31; ++j) out.push_back(j < vals.size() ? vals[j] : 0.0f);
    }
    added += int(vals.size());
  }
  return added;
}

}  // namespace atl::kernels::cuda::testing
