// Packing of 4-bit codes, two per byte: element 2i in the low nibble of byte i, 2i+1 in the high
// one (the layout of every 4-bit format here).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace atl::kernels::formats {

// c (8 codes, each < 16) -> q (4 bytes). Word arithmetic instead of eight byte extracts: byte k
// of w | (w >> 4) is c[k] | c[k+1] << 4, and the even bytes are then gathered by shifts.
inline void pack_nibbles8(const uint8_t* c, uint8_t* q) {
  static_assert(std::endian::native == std::endian::little);
  uint64_t w;
  std::memcpy(&w, c, 8);
  w = (w | (w >> 4)) & 0x00ff00ff00ff00ffull;
  w = (w | (w >> 8)) & 0x0000ffff0000ffffull;
  w = w | (w >> 16);
  const auto packed = static_cast<uint32_t>(w);
  std::memcpy(q, &packed, 4);
}

}  // namespace atl::kernels::formats
