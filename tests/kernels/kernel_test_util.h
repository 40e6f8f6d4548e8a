// Shared helpers for the CPU kernel tests: seeded random buffers, thread-count scoping and a
// central finite-difference gradient checker (double precision).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu::testing {

template <typename T>
std::vector<T> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <typename To, typename From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Sets the op table's thread count for one scope, then restores the previous one.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : prev_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(prev_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int prev_;
};

// Compares an analytic gradient of the scalar `loss()` with respect to x against central
// differences (step h), element by element: |analytic − numeric| <= rtol·(|a| + |n|) + atol.
// `loss` must read x each time it is called. Checks every element (inputs are kept small).
inline void expect_grad_matches(const char* what, std::vector<double>& x,
                                const std::vector<double>& analytic,
                                const std::function<double()>& loss, double h = 1e-6,
                                double rtol = 1e-6, double atol = 1e-9) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  int failures = 0;
  double max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    const double numeric = (lp - lm) / (2 * h);
    max_abs = std::max(max_abs, std::abs(analytic[i]));
    const double err = std::abs(analytic[i] - numeric);
    if (err > rtol * (std::abs(analytic[i]) + std::abs(numeric)) + atol) {
      if (++failures <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric
                      << " err " << err;
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << x.size() << " elements differ";
  // A gradient that is identically zero would pass trivially: the objectives are built so it
  // is not.
  EXPECT_GT(max_abs, 1e-3) << what << ": gradient is (near) zero, the check is vacuous";
}

}  // namespace atl::kernels::cpu::testing
