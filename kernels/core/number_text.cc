#include "kernels/core/number_text.h"

#include <charconv>

namespace atl {

std::string shortest_decimal(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace atl
