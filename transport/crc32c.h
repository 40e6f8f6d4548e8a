// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and gRPC's
// own framing tools. Each TensorChunk carries the CRC-32C of its data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace atl::transport {

// Continues a running CRC: crc32c_extend(crc32c(a), b) == crc32c(a + b). Start from 0.
// Uses the SSE4.2 crc32 instruction when the build targets it, the table otherwise; both give
// identical results.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}
inline uint32_t crc32c(std::string_view s) {
  return crc32c(s.data(), s.size());
}

// The byte-at-a-time table implementation, always available (tests compare the two).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

// True when crc32c_extend uses the hardware instruction.
bool crc32c_hardware();

}  // namespace atl::transport
