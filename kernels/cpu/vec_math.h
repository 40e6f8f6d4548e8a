// Internal helpers shared by the CPU kernels (not part of the op table).
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace atl::kernels::cpu::detail {

// exp(x) for float written so that GCC vectorizes loops that call it (no libm call, no
// branches). Cephes expf: x = n·ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), a degree-7
// polynomial for e^r, then a two-step scaling by 2^n so that results in the subnormal range
// are still right. Max error about 1 ulp over the whole float range (checked by the tests
// against std::exp in double). Overflow gives +inf, underflow 0, NaN propagates.
inline float exp_vec(float x) {
  const float kHi = 88.72283935546875f;    // log(FLT_MAX) rounded up: exp overflows above
  const float kLo = -103.97208404541016f;  // below this exp rounds to 0 in float
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float n = std::nearbyint(xc * 1.44269504088896341f);  // round(x / ln2)
  float r = std::fma(n, -0.693359375f, xc);                   // ln2 high part (exact product)
  r = std::fma(n, 2.12194440e-4f, r);                         // ln2 low part
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  // 2^n = 2^n1 · 2^n2 with n1 = n/2, n2 = n - n1, each inside the normal exponent range.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const int32_t b1 = (n1 + 127) << 23;
  const int32_t b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > kHi ? INFINITY : y;
  y = x < kLo ? 0.0f : y;
  y = x != x ? x : y;
  return y;
}
inline double exp_vec(double x) {
  return std::exp(x);
}

// Runs OpenBLAS single-threaded while alive: for GEMMs issued from inside an OpenMP parallel
// region (one call per thread), so OpenBLAS's own thread pool is not oversubscribed.
class OpenBlasSingleThread {
 public:
  OpenBlasSingleThread();
  ~OpenBlasSingleThread();
  OpenBlasSingleThread(const OpenBlasSingleThread&) = delete;
  OpenBlasSingleThread& operator=(const OpenBlasSingleThread&) = delete;

 private:
  int prev_;
};

// True when a loop of `work` scalar operations is worth an OpenMP region. Only decides
// whether to fork; results never depend on it (work is split over independent outputs).
inline bool worth_threads(double work) {
  return work >= 32768.0;
}

}  // namespace atl::kernels::cpu::detail
