// Little-endian field access and the message checksum shared by codec and sparse-delta
// messages (both put a CRC-32C at bytes [24, 28) that covers every other byte).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

#include "kernels/core/crc32c.h"

namespace atl::algorithms::compress {

template <typename T>
inline void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Largest tensor a delta message may describe, as for codec messages (2^36 values).
inline constexpr uint64_t kMaxDeltaNumel = uint64_t{1} << 36;

// Bits per index for indices into n elements (at least 1), and bytes for k such indices packed
// LSB first (bit_pack.h).
inline uint32_t index_width(uint64_t n) {
  return n <= 1 ? 1u : static_cast<uint32_t>(std::bit_width(n - 1));
}
inline uint64_t index_bytes(uint64_t n, uint64_t k) { return (k * index_width(n) + 7) / 8; }

// CRC-32C of msg without its checksum field [24, 28). msg.size() >= 28.
inline uint32_t message_crc(std::span<const uint8_t> msg) {
  return crc32c_extend(crc32c(msg.data(), 24), msg.data() + 28, msg.size() - 28);
}

}  // namespace atl::algorithms::compress
