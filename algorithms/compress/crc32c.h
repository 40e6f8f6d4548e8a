// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of iSCSI/ext4/RocksDB.
// Uses the SSE4.2 crc32 instruction when compiled for it, a table otherwise; same result.
#pragma once

#include <cstddef>
#include <cstdint>

namespace atl::algorithms::compress {

// Continues a CRC: crc32c(crc32c(0, a), b) == crc32c(0, a ++ b). crc32c(0, "123456789") is
// 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace atl::algorithms::compress
