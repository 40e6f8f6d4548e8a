// libFuzzer target for the codec decoders and the θ-delta decoders (sparse-delta,
// sparse-delta-exact; chosen by the message's magic, decoded against a fixed base of numel
// values): any bytes, any expected numel (bounded), must give a Status or finite values, never a
// crash, leak or out-of-bounds access. Input: 2 bytes numel
// (0..65535, little-endian), 1 flag byte, then the message. When the flag is odd the message's
// CRC is recomputed first, so mutations get past the checksum and reach the structural checks.
// Build and run: tests/fuzz/run.sh [seconds].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/core/crc32c.h"

#include "algorithms/compress/codec.h"
#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/sparse_delta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint64_t numel = data[0] | (uint64_t{data[1]} << 8);
  std::vector<uint8_t> msg(data + 3, data + size);
  if ((data[2] & 1) && msg.size() >= 32) {
    const uint32_t c = atl::crc32c_extend(atl::crc32c(msg.data(), 24), msg.data() + 28,
                                          msg.size() - 28);
    std::memcpy(msg.data() + 24, &c, 4);
  }
  namespace cx = atl::algorithms::compress;
  atl::StatusOr<std::vector<float>> out = std::vector<float>{};
  if (msg.size() >= 4 && (std::memcmp(msg.data(), "ATLE", 4) == 0 ||
                          std::memcmp(msg.data(), "ATLD", 4) == 0)) {
    std::vector<float> base(numel);
    for (size_t i = 0; i < numel; ++i) base[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
    out = msg[3] == 'E' ? cx::exact_delta::decode(msg, base) : cx::sparse_delta::decode(msg, base);
  } else {
    out = cx::decode(msg, numel);
  }
  if (out.ok()) {
    for (float v : *out) {
      if (!std::isfinite(v)) std::abort();  // decoders promise finite output
    }
  }
  return 0;
}
