// Decode tables by code for the CPU's block formats and 8-bit conversions: E2M1 by nibble, E4M3
// and E5M2 by byte, built at compile time from the scalar decoder (kernels/formats/scalar.h).
// Host code only: nvcc 13.0 did not compile the table template when scalar.h carried it (CUDA
// kernels call the scalar decoder instead).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/formats/minifloat.h"

namespace atl::kernels::formats {

template <MinifloatSpec S, size_t N>
constexpr std::array<float, N> minifloat_decode_table() {
  std::array<float, N> t{};
  for (uint32_t c = 0; c < N; ++c) t[c] = minifloat_decode<S>(c);
  return t;
}
inline constexpr std::array<float, 16> kE2M1Table = minifloat_decode_table<kE2M1Spec, 16>();
inline constexpr std::array<float, 256> kE4M3Table = minifloat_decode_table<kE4M3Spec, 256>();
inline constexpr std::array<float, 256> kE5M2Table = minifloat_decode_table<kE5M2Spec, 256>();

}  // namespace atl::kernels::formats
