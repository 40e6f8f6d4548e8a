#include "kernels/core/philox.h"

#include <cmath>

namespace atl {

double Philox::normal(uint64_t i) const {
  double u1 = uniform_double(2 * i), u2 = uniform_double(2 * i + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace atl
