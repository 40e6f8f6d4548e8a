#include "algorithms/compress/sparse_delta.h"

#include <bit>
#include <cstring>
#include <string>

#include "algorithms/compress/bit_pack.h"
#include "algorithms/compress/wire.h"
#include "kernels/core/crc32c.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms::compress::sparse_delta {

namespace fmt = atl::kernels::formats;

namespace {

static_assert(std::endian::native == std::endian::little, "wire format is little-endian");

constexpr char kMagic[4] = {'A', 'T', 'L', 'D'};


bool bf16_finite(uint16_t h) {
  return (h & 0x7f80u) != 0x7f80u;
}

}  // namespace

uint64_t count_changed(std::span<const float> current, std::span<const float> base) {
  uint64_t k = 0;
  const size_t n = std::min(current.size(), base.size());
  for (size_t i = 0; i < n; ++i) {
    k += fmt::bf16_from_f32(current[i]) != fmt::bf16_from_f32(base[i]) ? 1 : 0;
  }
  return k;
}

uint64_t message_bytes(uint64_t numel, uint64_t changed) {
  return kHeaderBytes + index_bytes(numel, changed) + 2 * changed;
}

StatusOr<std::vector<uint8_t>> encode(std::span<const float> current, std::span<const float> base) {
  const uint64_t n = current.size();
  if (base.size() != n) {
    return InvalidArgument("sparse-delta: current has " + std::to_string(n) + " values, base " +
                           std::to_string(base.size()));
  }
  if (n > kMaxDeltaNumel) return InvalidArgument("sparse-delta: more than 2^36 values");
  uint64_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t c = fmt::bf16_from_f32(current[i]);
    if (!bf16_finite(c)) {
      return InvalidArgument("sparse-delta: current value " + std::to_string(i) +
                             " is not finite at bf16 precision");
    }
    k += c != fmt::bf16_from_f32(base[i]) ? 1 : 0;
  }
  const uint32_t w = index_width(n);
  std::vector<uint8_t> msg(message_bytes(n, k));
  uint8_t* p = msg.data();
  std::memcpy(p, kMagic, 4);
  store<uint16_t>(p + 4, kVersion);
  p[6] = static_cast<uint8_t>(w);
  p[7] = 0;
  store<uint64_t>(p + 8, n);
  store<uint64_t>(p + 16, k);
  store<uint32_t>(p + 28, 0);
  BitWriter bw(p + kHeaderBytes);
  uint8_t* vals = p + kHeaderBytes + index_bytes(n, k);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t c = fmt::bf16_from_f32(current[i]);
    if (c != fmt::bf16_from_f32(base[i])) {
      bw.put(i, w);
      store<uint16_t>(vals, c);
      vals += 2;
    }
  }
  bw.flush();
  store<uint32_t>(p + 24, message_crc(msg));
  return msg;
}

Status decode_into(std::span<const uint8_t> bytes, std::span<const float> base,
                   std::span<float> out) {
  const uint64_t n = base.size();
  if (out.size() != n) {
    return InvalidArgument("sparse-delta: output has " + std::to_string(out.size()) +
                           " values, base " + std::to_string(n));
  }
  if (bytes.size() < kHeaderBytes) {
    return DataLoss("sparse-delta message truncated: " + std::to_string(bytes.size()) +
                    " bytes, the header alone is 32");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return DataLoss("not a sparse-delta message (bad magic)");
  const uint16_t version = load<uint16_t>(p + 4);
  if (version != kVersion) {
    return InvalidArgument("sparse-delta message version " + std::to_string(version) +
                           " is not supported (this build reads version 1)");
  }
  if (p[7] != 0 || load<uint32_t>(p + 28) != 0) {
    return DataLoss("sparse-delta message: reserved field is not zero");
  }
  const uint64_t declared_n = load<uint64_t>(p + 8);
  const uint64_t k = load<uint64_t>(p + 16);
  if (load<uint32_t>(p + 24) != message_crc(bytes)) {
    return DataLoss("sparse-delta message: bad checksum");
  }
  if (declared_n != n) {
    return InvalidArgument("sparse-delta message is against " + std::to_string(declared_n) +
                           " values, the base has " + std::to_string(n));
  }
  const uint32_t w = index_width(n);
  if (p[6] != w) return DataLoss("sparse-delta message: index width does not match numel");
  if (k > n) return DataLoss("sparse-delta message: more changed elements than values");
  if (bytes.size() != message_bytes(n, k)) {
    return DataLoss("sparse-delta message: length " + std::to_string(bytes.size()) +
                    " does not match its header (" + std::to_string(message_bytes(n, k)) + ")");
  }
  // Validate everything before touching out (which may be base itself).
  const uint8_t* vals = p + kHeaderBytes + index_bytes(n, k);
  {
    BitReader br(p + kHeaderBytes);
    uint64_t prev = 0;
    for (uint64_t j = 0; j < k; ++j) {
      const uint64_t i = br.get(w);
      if (i >= n || (j > 0 && i <= prev)) {
        return DataLoss("sparse-delta message: indices not strictly increasing and in range");
      }
      prev = i;
      if (!bf16_finite(load<uint16_t>(vals + 2 * j))) {
        return DataLoss("sparse-delta message: non-finite value");
      }
    }
    if (!br.rest_is_zero()) return DataLoss("sparse-delta message: nonzero padding after indices");
  }
  if (out.data() != base.data()) std::memcpy(out.data(), base.data(), n * sizeof(float));
  BitReader br(p + kHeaderBytes);
  for (uint64_t j = 0; j < k; ++j) {
    out[br.get(w)] = fmt::f32_from_bf16(load<uint16_t>(vals + 2 * j));
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, std::span<const float> base) {
  std::vector<float> out(base.size());
  ATOLL_RETURN_IF_ERROR(decode_into(bytes, base, out));
  return out;
}

}  // namespace atl::algorithms::compress::sparse_delta
