#include "algorithms/compress/wire.h"
#include "algorithms/compress/exact_delta.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "algorithms/compress/bit_pack.h"
#include "kernels/core/crc32c.h"

namespace atl::algorithms::compress::exact_delta {

namespace {

static_assert(std::endian::native == std::endian::little, "wire format is little-endian");

constexpr char kMagic[4] = {'A', 'T', 'L', 'E'};
uint64_t indices_message_bytes(uint64_t n, uint64_t k) {
  return kHeaderBytes + index_bytes(n, k) + 4 * k;
}
uint64_t runs_message_bytes(uint64_t runs, uint64_t values) {
  return kHeaderBytes + 16 * runs + 4 * values;
}

template <typename T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
bool finite_bits(uint32_t b) {
  return (b & 0x7f800000u) != 0x7f800000u;
}

uint32_t message_crc(std::span<const uint8_t> msg) {
  return crc32c_extend(crc32c(msg.data(), 24), msg.data() + 28, msg.size() - 28);
}

// Calls run(start, end) for each run of changed elements, gaps ≤ kMergeGap bridged.
template <typename F>
void for_each_run(std::span<const float> current, std::span<const float> base, F&& run) {
  const size_t n = current.size();
  bool open = false;
  size_t start = 0, last = 0;  // last changed element of the open run
  for (size_t i = 0; i < n; ++i) {
    if (bits(current[i]) == bits(base[i])) continue;
    if (open && i - last - 1 <= kMergeGap) {
      last = i;
      continue;
    }
    if (open) run(start, last + 1);
    open = true;
    start = last = i;
  }
  if (open) run(start, last + 1);
}

}  // namespace

Plan plan(std::span<const float> current, std::span<const float> base) {
  Plan p;
  if (current.size() != base.size()) return p;
  p.numel = current.size();
  for (size_t i = 0; i < current.size(); ++i) p.changed += bits(current[i]) != bits(base[i]);
  for_each_run(current, base, [&](size_t b, size_t e) {
    ++p.runs;
    p.run_values += e - b;
  });
  const uint64_t by_index = indices_message_bytes(p.numel, p.changed);
  const uint64_t by_runs = runs_message_bytes(p.runs, p.run_values);
  p.use_runs = by_runs < by_index;
  p.bytes = p.use_runs ? by_runs : by_index;
  return p;
}

StatusOr<std::vector<uint8_t>> encode(std::span<const float> current, std::span<const float> base) {
  const uint64_t n = current.size();
  if (base.size() != n)
    return InvalidArgument("sparse-delta-exact: current has " + std::to_string(n) +
                           " values, base " + std::to_string(base.size()));
  if (n > kMaxDeltaNumel) return InvalidArgument("sparse-delta-exact: more than 2^36 values");
  for (size_t i = 0; i < n; ++i)
    if (!finite_bits(bits(current[i])))
      return InvalidArgument("sparse-delta-exact: current value " + std::to_string(i) +
                             " is not finite");
  const Plan pl = plan(current, base);
  std::vector<uint8_t> msg(pl.bytes);
  uint8_t* p = msg.data();
  std::memcpy(p, kMagic, 4);
  store<uint16_t>(p + 4, kVersion);
  store<uint64_t>(p + 8, n);
  store<uint32_t>(p + 28, 0);
  if (pl.use_runs) {
    p[6] = 1;
    p[7] = 0;
    store<uint64_t>(p + 16, pl.runs);
    uint8_t* hdr = p + kHeaderBytes;
    uint8_t* vals = hdr + 16 * pl.runs;
    for_each_run(current, base, [&](size_t b, size_t e) {
      store<uint64_t>(hdr, b);
      store<uint64_t>(hdr + 8, e - b);
      hdr += 16;
      std::memcpy(vals, current.data() + b, (e - b) * sizeof(float));
      vals += (e - b) * sizeof(float);
    });
  } else {
    const uint32_t w = index_width(n);
    p[6] = 0;
    p[7] = static_cast<uint8_t>(w);
    store<uint64_t>(p + 16, pl.changed);
    BitWriter bw(p + kHeaderBytes);
    uint8_t* vals = p + kHeaderBytes + index_bytes(n, pl.changed);
    for (size_t i = 0; i < n; ++i) {
      if (bits(current[i]) == bits(base[i])) continue;
      bw.put(i, w);
      std::memcpy(vals, &current[i], 4);
      vals += 4;
    }
    bw.flush();
  }
  store<uint32_t>(p + 24, message_crc(msg));
  return msg;
}

Status decode_into(std::span<const uint8_t> bytes, std::span<const float> base,
                   std::span<float> out) {
  const uint64_t n = base.size();
  if (out.size() != n)
    return InvalidArgument("sparse-delta-exact: output has " + std::to_string(out.size()) +
                           " values, base " + std::to_string(n));
  if (bytes.size() < kHeaderBytes)
    return DataLoss("sparse-delta-exact message truncated: " + std::to_string(bytes.size()) +
                    " bytes, the header alone is 32");
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0)
    return DataLoss("not a sparse-delta-exact message (bad magic)");
  const uint16_t version = load<uint16_t>(p + 4);
  if (version != kVersion)
    return InvalidArgument("sparse-delta-exact message version " + std::to_string(version) +
                           " is not supported (this build reads version 1)");
  if (load<uint32_t>(p + 28) != 0)
    return DataLoss("sparse-delta-exact message: reserved field is not zero");
  if (load<uint32_t>(p + 24) != message_crc(bytes))
    return DataLoss("sparse-delta-exact message: bad checksum");
  const uint64_t declared_n = load<uint64_t>(p + 8);
  if (declared_n != n)
    return InvalidArgument("sparse-delta-exact message is against " + std::to_string(declared_n) +
                           " values, the base has " + std::to_string(n));
  const uint8_t mode = p[6];
  const uint64_t count = load<uint64_t>(p + 16);
  const uint64_t size = bytes.size();
  auto finite_values = [&](const uint8_t* vals, uint64_t m) {
    for (uint64_t j = 0; j < m; ++j)
      if (!finite_bits(load<uint32_t>(vals + 4 * j))) return false;
    return true;
  };

  if (mode == 0) {
    const uint32_t w = index_width(n);
    if (p[7] != w) return DataLoss("sparse-delta-exact message: index width does not match numel");
    if (count > n) return DataLoss("sparse-delta-exact message: more changed elements than values");
    if (size != indices_message_bytes(n, count))
      return DataLoss("sparse-delta-exact message: length " + std::to_string(size) +
                      " does not match its header (" +
                      std::to_string(indices_message_bytes(n, count)) + ")");
    const uint8_t* vals = p + kHeaderBytes + index_bytes(n, count);
    {
      BitReader br(p + kHeaderBytes);
      uint64_t prev = 0;
      for (uint64_t j = 0; j < count; ++j) {
        const uint64_t i = br.get(w);
        if (i >= n || (j > 0 && i <= prev))
          return DataLoss("sparse-delta-exact message: indices not strictly increasing and in range");
        prev = i;
      }
      if (!br.rest_is_zero())
        return DataLoss("sparse-delta-exact message: nonzero padding after indices");
    }
    if (!finite_values(vals, count)) return DataLoss("sparse-delta-exact message: non-finite value");
    if (out.data() != base.data()) std::memcpy(out.data(), base.data(), n * sizeof(float));
    BitReader br(p + kHeaderBytes);
    for (uint64_t j = 0; j < count; ++j) std::memcpy(&out[br.get(w)], vals + 4 * j, 4);
    return Status::Ok();
  }
  if (mode != 1) return DataLoss("sparse-delta-exact message: unknown mode " + std::to_string(mode));
  if (p[7] != 0) return DataLoss("sparse-delta-exact message: reserved field is not zero");
  // Each run covers ≥ 1 value, so a valid message has count ≤ n and size ≥ 32 + 20·count.
  if (count > n || count > (size - kHeaderBytes) / 20)
    return DataLoss("sparse-delta-exact message: " + std::to_string(count) +
                    " runs do not fit its length");
  const uint8_t* hdr = p + kHeaderBytes;
  uint64_t values = 0, end = 0;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t b = load<uint64_t>(hdr + 16 * j), len = load<uint64_t>(hdr + 16 * j + 8);
    if (len == 0 || b > n || len > n - b || (j > 0 && b <= end))
      return DataLoss("sparse-delta-exact message: runs not ordered, empty or out of range");
    end = b + len;
    values += len;  // ≤ n: runs are disjoint and inside [0, n)
  }
  if (size != runs_message_bytes(count, values))
    return DataLoss("sparse-delta-exact message: length " + std::to_string(size) +
                    " does not match its runs (" + std::to_string(runs_message_bytes(count, values)) +
                    ")");
  const uint8_t* vals = hdr + 16 * count;
  if (!finite_values(vals, values)) return DataLoss("sparse-delta-exact message: non-finite value");
  if (out.data() != base.data()) std::memcpy(out.data(), base.data(), n * sizeof(float));
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t b = load<uint64_t>(hdr + 16 * j), len = load<uint64_t>(hdr + 16 * j + 8);
    std::memcpy(out.data() + b, vals, len * sizeof(float));
    vals += len * sizeof(float);
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, std::span<const float> base) {
  std::vector<float> out(base.size());
  ATOLL_RETURN_IF_ERROR(decode_into(bytes, base, out));
  return out;
}

}  // namespace atl::algorithms::compress::exact_delta
