#include "coordinator/folded_series.h"

#include <algorithm>
#include <cmath>

namespace atl::coordinator {

void FoldedSeries::add(double round, double value) {
  if (has_last_ && round == last_round_) {
    // The previous value sits in the pending point, or in the newest kept one when that just
    // filled up (merging keeps sums, so it is still in the newest).
    Point& holder = pending_.count > 0 ? pending_ : points_.back();
    holder.value_sum += value - last_value_;
    last_value_ = value;
    return;
  }
  if (has_last_ && round < last_round_) {
    if (stride_ != 1) return;
    const auto at = std::upper_bound(points_.begin(), points_.end(), round,
                                     [](double r, const Point& p) { return r < p.round_sum; });
    points_.insert(at, Point{round, value, 1});
    if (points_.size() >= kMaxSeriesPoints) merge_pairs();
    return;
  }
  has_last_ = true;
  last_round_ = round;
  last_value_ = value;
  pending_.round_sum += round;
  pending_.value_sum += value;
  ++pending_.count;
  if (pending_.count < stride_) return;
  points_.push_back(pending_);
  pending_ = Point{};
  if (points_.size() >= kMaxSeriesPoints) merge_pairs();
}

void FoldedSeries::merge_pairs() {
  // kMaxSeriesPoints is even, so every kept point finds its pair.
  static_assert(kMaxSeriesPoints % 2 == 0);
  size_t out = 0;
  for (size_t i = 0; i + 1 < points_.size(); i += 2, ++out) {
    const Point& a = points_[i];
    const Point& b = points_[i + 1];
    points_[out] = Point{a.round_sum + b.round_sum, a.value_sum + b.value_sum, a.count + b.count};
  }
  points_.resize(out);
  stride_ *= 2;
}

Series FoldedSeries::bucketed(uint64_t bucket) const {
  bucket = std::max<uint64_t>(bucket, 1);
  Series out;
  out.reserve(points() / bucket + 2);
  bool open = false;
  int64_t key = 0;
  Point sum;
  const auto close = [&] {
    if (open) out.push_back({sum.round_sum / sum.count, sum.value_sum / sum.count});
  };
  const auto fold = [&](const Point& p) {
    if (p.count == 0) return;
    // Round 0 (the initial parameters) is a bucket of its own; rounds 1..bucket the first.
    const double mean_round = p.round_sum / p.count;
    const int64_t k =
        mean_round < 1 ? -1 : static_cast<int64_t>(std::floor((mean_round - 1) / bucket));
    if (!open || k != key) {
      close();
      open = true;
      key = k;
      sum = Point{};
    }
    sum.round_sum += p.round_sum;
    sum.value_sum += p.value_sum;
    sum.count += p.count;
  };
  for (const Point& p : points_) fold(p);
  fold(pending_);
  close();
  return out;
}

}  // namespace atl::coordinator
