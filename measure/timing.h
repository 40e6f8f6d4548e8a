// Timing helpers of the measurements behind `atoll bench`. The machine may be shared, so a
// figure is the fastest (least disturbed) or the median (robust to bursts) of repeated runs,
// never a single run.
#pragma once

#include <chrono>
#include <vector>

namespace atl::measure {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds of one call of fn: the fastest of at least `reps` calls and at least `min_total`
// seconds of calls in all (at most 1000 timed calls), after one untimed warm-up call (which also
// faults in the output's pages).
template <typename Fn>
double best_seconds(Fn&& fn, int reps, double min_total = 0.2) {
  fn();
  double best = 1e30, total = 0;
  for (int r = 0; r < reps || total < min_total; ++r) {
    const auto t0 = Clock::now();
    fn();
    const double s = seconds_since(t0);
    best = s < best ? s : best;
    total += s;
    if (r > 1000) break;
  }
  return best;
}

// The median of xs (sorted in place; the mean of the two middle values for an even count).
// xs must not be empty.
double median(std::vector<double>& xs);

// The peak resident set size of this process so far, in bytes (getrusage).
long long peak_rss_bytes();

}  // namespace atl::measure
