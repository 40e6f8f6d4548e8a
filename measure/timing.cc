#include "measure/timing.h"

#include <sys/resource.h>

#include <algorithm>

namespace atl::measure {

double median(std::vector<double>& xs) {
  std::sort(xs.begin(), xs.end());
  const size_t mid = xs.size() / 2;
  return xs.size() % 2 ? xs[mid] : 0.5 * (xs[mid - 1] + xs[mid]);
}

long long peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<long long>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace atl::measure
