// Inputs of the quantizer tests (host twins and kernels).
//
// append_fma_sensitive_blocks: inputs on which int8/int4 block codes depend on FMA contraction:
// blocks with amax 3 (so inv = qmax / 3 is inexact) whose other 31 values x have x·inv within
// rounding of a tie k + 1/2. Round-to-nearest of fl(x·inv) and of the exact x·inv (one FMA) then
// differ.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace atl::kernels::cuda::testing {

// n values: normals over ±2^-30..2^20, ties of small formats, zeros, subnormals; with_special
// adds ±inf and NaN in a few places.
inline std::vector<float> tricky(size_t n, uint32_t seed, bool with_special) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int kind = int(g() % 10);
    const float m = float(g() % 100000) / 50000.0f - 1.0f;
    if (kind < 6)
      v[i] = std::ldexp(m, int(g() % 50) - 30);
    else if (kind == 6)
      v[i] = float(int(g() % 64) - 32) * 0.25f;  // ties of E2M1 / int codes
    else if (kind == 7)
      v[i] = 0.0f;
    else if (kind == 8)
      v[i] = std::bit_cast<float>(uint32_t(g() % 0x7fffff));  // subnormal
    else
      v[i] = m * 1000.0f;
  }
  if (with_special && n > 100) {
    v[3] = std::numeric_limits<float>::infinity();
    v[50] = -std::numeric_limits<float>::infinity();
    v[77] = std::numeric_limits<float>::quiet_NaN();
    v[99] = -std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

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
