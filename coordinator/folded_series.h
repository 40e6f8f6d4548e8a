// A metric series folded in one value at a time, in bounded memory, for the dashboard's charts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl::coordinator {

// x = rounds completed (0 = the initial parameters), y = the value.
struct SeriesPoint {
  double round = 0;
  double value = 0;
};
using Series = std::vector<SeriesPoint>;

// The most points a metrics request may ask for per series (GET …/metrics?max_points=).
inline constexpr uint32_t kMaxSeriesPoints = 5000;

// Values in round order, kept as means of `stride()` consecutive values each (1 until the series
// first holds kMaxSeriesPoints points; then neighbouring pairs are merged and the stride
// doubles). A series of n values therefore holds between kMaxSeriesPoints / 2 and
// kMaxSeriesPoints points (24 bytes each: at most 120 kB), however long the run; point i
// covers values [i·stride, (i+1)·stride), plus one partial point for the newest values.
class FoldedSeries {
 public:
  // Folds one value in. A round equal to the previous value's replaces that value (the latest
  // report of a round wins). An earlier round is put in its place while the stride is 1 and left
  // out after that (values arrive in round order: the store's keys are).
  void add(double round, double value);
  // Means over buckets of `bucket` rounds, [1, bucket], [bucket + 1, 2·bucket], … (round 0
  // alone), each point weighted by the values it holds. A bucket that is a multiple of
  // stride() splits no kept point: means of a value per round are then exact.
  Series bucketed(uint64_t bucket) const;
  uint64_t stride() const { return stride_; }
  size_t points() const { return points_.size() + (pending_.count > 0 ? 1 : 0); }

 private:
  struct Point {
    double round_sum = 0, value_sum = 0;
    uint64_t count = 0;  // values folded in
  };
  void merge_pairs();
  std::vector<Point> points_;  // each of exactly stride_ values
  Point pending_;              // the newest values, fewer than stride_
  uint64_t stride_ = 1;
  bool has_last_ = false;
  double last_round_ = 0, last_value_ = 0;
};

}  // namespace atl::coordinator
