#include "algorithms/diloco/privacy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/philox.h"

namespace atl::algorithms {

namespace {

// Keeps the privacy noise's Philox key apart from every other use of the experiment seed
// (initialisation, data order, precision rounding): "DPNOISE!" in ASCII.
constexpr uint64_t kNoiseKeyTag = 0x4450'4E4F'4953'4521ull;

// Rounding each scaled element to fp32 moves it by at most 2⁻²⁴ of itself, so the norm by at
// most that share too: aiming 1e-6 under C keeps the clipped norm ≤ C after rounding.
constexpr double kClipMargin = 1.0 - 1e-6;

constexpr double kInf = std::numeric_limits<double>::infinity();

// min over the orders of f(α); +inf when every order gives +inf.
template <typename F>
double min_over_orders(F f) {
  double best = kInf;
  for (double alpha : rdp_orders()) best = std::min(best, f(alpha));
  return best;
}

}  // namespace

bool clip_to_norm(std::span<float> v, double norm, double clip_norm) {
  if (!(norm > clip_norm)) return false;
  const double factor = clip_norm / norm * kClipMargin;
  for (float& x : v) x = static_cast<float>(static_cast<double>(x) * factor);
  return true;
}

void add_privacy_noise(std::span<float> out, double stddev, uint64_t seed, uint64_t round,
                       uint64_t first_index) {
  if (!(stddev > 0)) return;
  const Philox rng(seed ^ kNoiseKeyTag, round);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(out[i]) + stddev * rng.normal(first_index + i));
}

double privacy_noise_stddev(const PrivacyOptions& o, uint64_t sites) {
  if (sites == 0) return 0.0;
  return o.noise_multiplier * o.clip_norm / static_cast<double>(sites);
}

double gaussian_rdp(double alpha, double noise_multiplier) {
  if (!(noise_multiplier > 0)) return kInf;
  return alpha / (2.0 * noise_multiplier * noise_multiplier);
}

const std::vector<double>& rdp_orders() {
  static const std::vector<double> orders = [] {
    std::vector<double> o;
    for (int x = 1; x < 100; ++x) o.push_back(1.0 + x / 10.0);
    for (int a = 12; a < 64; ++a) o.push_back(a);
    return o;
  }();
  return orders;
}

double epsilon_after_rounds(uint64_t rounds, double z, double delta) {
  if (rounds == 0) return 0.0;
  if (!(z > 0)) return kInf;
  const double t = static_cast<double>(rounds);
  return min_over_orders([&](double a) {
    return t * gaussian_rdp(a, z) + std::log((a - 1) / a) -
           (std::log(delta) + std::log(a)) / (a - 1);
  });
}

double epsilon_after_rounds_classic(uint64_t rounds, double z, double delta) {
  if (rounds == 0) return 0.0;
  if (!(z > 0)) return kInf;
  const double t = static_cast<double>(rounds);
  return min_over_orders(
      [&](double a) { return t * gaussian_rdp(a, z) + std::log(1.0 / delta) / (a - 1); });
}

// The largest noise multiplier min_noise_multiplier_within tries.
constexpr double kMaxNoiseSearched = 1e9;

uint64_t max_rounds_within(double target, double z, double delta, uint64_t max_rounds) {
  // ε grows with the round count: the largest T in [0, max_rounds] with ε(T) ≤ target.
  uint64_t lo = 0, hi = max_rounds;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (epsilon_after_rounds(mid, z, delta) <= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

double epsilon_floor(double delta) {
  return epsilon_after_rounds(1, kMaxNoiseSearched, delta);
}

double min_noise_multiplier_within(double target, uint64_t rounds, double delta) {
  // ε falls as z grows: bisect in log space, then round up to 3 significant digits.
  if (epsilon_after_rounds(rounds, kMaxNoiseSearched, delta) > target) return kInf;
  double lo = 1e-3, hi = 1.0;
  while (epsilon_after_rounds(rounds, hi, delta) > target && hi < kMaxNoiseSearched) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    if (epsilon_after_rounds(rounds, mid, delta) > target)
      lo = mid;
    else
      hi = mid;
  }
  // k·10^e with k a 3-digit integer; dividing by an exact power of ten for e < 0 gives the
  // double nearest the decimal, so it prints as written ("1.68", not "1.6800000000000002").
  const int e = static_cast<int>(std::floor(std::log10(hi))) - 2;
  const double pow10 = std::pow(10.0, std::abs(e));
  auto decimal = [&](double k) { return e < 0 ? k / pow10 : k * pow10; };
  double k = std::ceil(e < 0 ? hi * pow10 : hi / pow10);
  while (epsilon_after_rounds(rounds, decimal(k), delta) > target) k += 1;
  return decimal(k);
}

}  // namespace atl::algorithms
