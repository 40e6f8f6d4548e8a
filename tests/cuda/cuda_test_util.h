// Shared pieces of the CUDA tests: a fixture that skips without a GPU, host<->device copies,
// random inputs and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/runtime.h"

// A Status-returning call that must succeed (the status is printed when it does not).
#define ASSERT_OK(expr)                     \
  do {                                      \
    const ::atl::Status _s = (expr);        \
    ASSERT_TRUE(_s.ok()) << _s.to_string(); \
  } while (0)

namespace atl::kernels::cuda::testing {

// Skips the test with "no CUDA device: <reason>" when the machine has none; otherwise gives a
// Context on device 0.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto n = device_count();
    if (!n.ok()) {
      GTEST_SKIP() << "no CUDA device: " << n.status().message();
    }
    auto ctx = Context::create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
  }
  Context& ctx() { return *ctx_; }

  template <typename T>
  DeviceBuffer<T> to_device(const std::vector<T>& h) {
    auto b = DeviceBuffer<T>::alloc(h.size() == 0 ? 1 : h.size());
    if (!b.ok()) {
      ADD_FAILURE() << b.status().to_string();
      return DeviceBuffer<T>();
    }
    if (!h.empty()) {
      EXPECT_TRUE(b->upload(h.data(), h.size()).ok());
    }
    return std::move(b).value();
  }
  template <typename T>
  std::vector<T> to_host(const DeviceBuffer<T>& d, size_t n) {
    EXPECT_TRUE(ctx_->synchronize().ok());
    std::vector<T> h(n);
    const Status st = d.download(h.data(), n);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return h;
  }

 private:
  std::unique_ptr<Context> ctx_;
};

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |a - b| / (atol + rtol |b|) <= 1 for every element; reports the worst.
inline ::testing::AssertionResult close(const std::vector<float>& a, const std::vector<float>& b,
                                        double rtol, double atol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size mismatch";
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double(a[i]) - double(b[i])) / (atol + rtol * std::abs(double(b[i])));
    if (!(e <= worst)) {
      worst = e;
      wi = i;
    }
    if (std::isnan(e)) return ::testing::AssertionFailure() << "NaN at " << i;
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << wi << ": got " << a[wi] << ", want "
                                       << b[wi] << " (error " << worst << "x tolerance)";
}

// Bitwise equality; NaN matches NaN when nan_any (decoders: payload bits may differ).
inline ::testing::AssertionResult same_bits(const std::vector<float>& a,
                                            const std::vector<float>& b, bool nan_any = false) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size mismatch";
  for (size_t i = 0; i < a.size(); ++i) {
    if (nan_any && std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace atl::kernels::cuda::testing
