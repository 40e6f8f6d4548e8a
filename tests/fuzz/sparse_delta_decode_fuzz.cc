// libFuzzer target for the sparse-delta decoder: any bytes against a fixed base must give a
// Status or finite values, never a crash or out-of-bounds access, and a failed in-place decode
// must leave the base untouched. Input: 2 bytes numel (little-endian), 1 flag byte, then the
// message; an odd flag recomputes the message's CRC so mutations reach the structural checks.
// Build and run: tests/fuzz/run.sh [seconds].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/compress/sparse_delta.h"
#include "kernels/core/crc32c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sd = atl::algorithms::compress::sparse_delta;
  if (size < 3) return 0;
  const size_t numel = data[0] | (size_t{data[1]} << 8);
  std::vector<uint8_t> msg(data + 3, data + size);
  if ((data[2] & 1) && msg.size() >= 32) {
    const uint32_t c = atl::crc32c_extend(atl::crc32c(msg.data(), 24), msg.data() + 28,
                                          msg.size() - 28);
    std::memcpy(msg.data() + 24, &c, 4);
  }
  std::vector<float> base(numel);
  for (size_t i = 0; i < numel; ++i) base[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  std::vector<float> theta = base;
  const atl::Status s = sd::decode_into(msg, theta, theta);
  if (s.ok()) {
    for (float v : theta) {
      if (!std::isfinite(v)) std::abort();  // finite base + finite values
    }
  } else if (theta != base) {
    std::abort();  // validation happens before the output is written
  }
  return 0;
}
