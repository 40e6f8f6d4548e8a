#include "kernels/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__) && defined(__x86_64__)
#include <nmmintrin.h>
#define ATL_CRC32C_HW 1
#endif

namespace atl {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reversed

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

// Polynomials over GF(2) modulo the CRC polynomial, in the CRC's reflected bit order: bit 31 is
// x^0, bit 0 is x^31. a * b mod P.
constexpr uint32_t mul_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 n) mod P: the operator that appends n zero bytes to a raw (unconditioned) CRC state.
constexpr uint32_t x_pow_8n(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8
  while (n != 0) {
    if (n & 1u) result = mul_mod_p(square, result);
    square = mul_mod_p(square, square);
    n >>= 1;
  }
  return result;
}

#if defined(ATL_CRC32C_HW)
// Raw state (no pre/post inversion) over n bytes with one stream.
inline uint32_t hw_serial(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned-safe; x86 is little-endian as the CRC expects
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c64);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

// Three streams of kStripe bytes each per round: A = [0, S), B = [S, 2S), C = [2S, 3S).
// state(A B C) = shift(shift(state(A), S) ^ raw(B), S) ^ raw(C), shift = * x^(8S) mod P.
constexpr size_t kStripe = 8192;
constexpr uint32_t kShiftStripe = x_pow_8n(kStripe);

uint32_t hw_interleaved(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 3 * kStripe) {
    uint64_t a = c, b = 0, d = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kStripe;
    const uint8_t* pc = p + 2 * kStripe;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, pa + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wc, pc + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wc);
    }
    uint32_t s = mul_mod_p(kShiftStripe, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c = mul_mod_p(kShiftStripe, s) ^ static_cast<uint32_t>(d);
    p += 3 * kStripe;
    n -= 3 * kStripe;
  }
  return hw_serial(c, p, n);
}
#endif

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // The pre/post inversions cancel: crc(a + b) = crc(a) * x^(8 len_b) ^ crc(b) mod P.
  return mul_mod_p(x_pow_8n(len_b), crc_a) ^ crc_b;
}

#if defined(ATL_CRC32C_HW)
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return ~hw_interleaved(~crc, static_cast<const uint8_t*>(data), n);
}
bool crc32c_hardware() {
  return true;
}
#else
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return crc32c_extend_portable(crc, data, n);
}
bool crc32c_hardware() {
  return false;
}
#endif

}  // namespace atl
