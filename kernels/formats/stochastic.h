// Random bits for stochastic rounding. Element i of a tensor draws Philox(seed, stream).u32(i):
// the rounding of every element is a pure function of (key, index), independent of how the work
// is split into spans or threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/core/philox.h"

namespace atl::kernels::formats {

// Fills out[j] = rng.u32(first + j) for j < n, computing each Philox block (4 words) once.
inline void philox_fill(const Philox& rng, uint64_t first, uint32_t* out, size_t n) {
  size_t j = 0;
  while (j < n) {
    const uint64_t idx = first + j;
    const PhiloxBlock b = rng.block(idx >> 2);
    for (uint64_t w = idx & 3; w < 4 && j < n; ++w, ++j) out[j] = b[w];
  }
}

// Chunk size for span kernels that draw random bits into a stack buffer.
inline constexpr size_t kRandomChunk = 256;

}  // namespace atl::kernels::formats
