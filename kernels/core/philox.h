// Counter-based RNG (Philox4x32-10, Salmon et al. 2011): random numbers are a pure function of
// (key, counter), so every draw is reproducible from (seed, step, tensor, index) without state.
#pragma once

#include <array>
#include <cstdint>

namespace atl {

using PhiloxBlock = std::array<uint32_t, 4>;

inline PhiloxBlock philox4x32_10(PhiloxBlock ctr, uint64_t key64) {
  uint32_t k0 = static_cast<uint32_t>(key64), k1 = static_cast<uint32_t>(key64 >> 32);
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// A stream of random numbers keyed by (seed, stream id); element i is a pure function of i.
class Philox {
 public:
  Philox(uint64_t seed, uint64_t stream) : key_(seed), stream_(stream) {}
  // Four 32-bit words for block `index`.
  PhiloxBlock block(uint64_t index) const {
    return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                          static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                         key_);
  }
  uint32_t u32(uint64_t i) const { return block(i >> 2)[i & 3]; }
  // Uniform in [0, 1) with 24 random bits.
  float uniform(uint64_t i) const { return (u32(i) >> 8) * (1.0f / 16777216.0f); }
  // Uniform in [0, 1) with 53 random bits (uses words 2i and 2i+1).
  double uniform_double(uint64_t i) const {
    uint64_t hi = u32(2 * i) >> 5, lo = u32(2 * i + 1) >> 6;
    return (hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0);
  }
  // Standard normal via Box-Muller on uniforms 2i, 2i+1 (deterministic, no caching).
  double normal(uint64_t i) const;
  // Uniform integer in [0, n) (n > 0), by 64-bit multiply-shift of two words.
  uint64_t below(uint64_t i, uint64_t n) const {
    uint64_t r = (static_cast<uint64_t>(u32(2 * i)) << 32) | u32(2 * i + 1);
    return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
  }

 private:
  uint64_t key_;
  uint64_t stream_;
};

}  // namespace atl
