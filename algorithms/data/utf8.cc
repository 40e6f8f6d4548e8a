#include "algorithms/data/utf8.h"

#include <unicode/utf8.h>

#include <cstdint>

namespace atl::algorithms::data {

size_t first_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const auto n = static_cast<int64_t>(text.size());
  for (int64_t i = 0; i < n;) {
    const int64_t start = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return static_cast<size_t>(start);
  }
  return std::string_view::npos;
}

}  // namespace atl::algorithms::data
