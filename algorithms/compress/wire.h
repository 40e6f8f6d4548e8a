// Little-endian field access and the message checksum shared by codec and sparse-delta
// messages (both put a CRC-32C at bytes [24, 28) that covers every other byte).
#pragma once

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

// CRC-32C of msg without its checksum field [24, 28). msg.size() >= 28.
inline uint32_t message_crc(std::span<const uint8_t> msg) {
  return crc32c_extend(crc32c(msg.data(), 24), msg.data() + 28, msg.size() - 28);
}

}  // namespace atl::algorithms::compress
