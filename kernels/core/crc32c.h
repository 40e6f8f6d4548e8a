// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of iSCSI, ext4, RocksDB
// and gRPC's framing tools. One implementation for every layer: transport chunks carry the
// CRC-32C of their data, codec messages the CRC-32C of their header and payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace atl {

// Continues a running CRC: crc32c_extend(crc32c(a), b) == crc32c(a + b). Start from 0.
// crc32c("123456789") == 0xE3069283.
// With SSE4.2 it uses the crc32 instruction, on buffers of 24 KiB and more as three
// interleaved streams (the instruction has a latency of 3 cycles and a throughput of 1), joined
// by a multiplication modulo the polynomial; otherwise a byte table. Every path gives the same
// result.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}
inline uint32_t crc32c(std::string_view s) {
  return crc32c(s.data(), s.size());
}

// The byte-at-a-time table implementation, always available (tests compare the two).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

// CRC of a + b from crc32c(a), crc32c(b) and b's length (zlib's crc32_combine): lets parts of a
// buffer be checksummed separately (in parallel, or fused with the pass that writes them).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// True when crc32c_extend uses the hardware instruction.
bool crc32c_hardware();

}  // namespace atl
