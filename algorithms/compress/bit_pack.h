// Bit packing, least significant bit first: fixed-width index lists in codec and sparse-delta
// messages.
#pragma once

#include <cstdint>

namespace atl::algorithms::compress {

class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void put(uint64_t v, uint32_t bits) {
    acc_ |= v << fill_;
    fill_ += bits;
    while (fill_ >= 8) {
      *out_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void flush() {
    if (fill_ > 0) *out_++ = static_cast<uint8_t>(acc_);
    acc_ = 0;
    fill_ = 0;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  uint32_t fill_ = 0;
};

class BitReader {
 public:
  explicit BitReader(const uint8_t* in) : in_(in) {}
  uint64_t get(uint32_t bits) {  // bits <= 40
    while (fill_ < bits) {
      acc_ |= static_cast<uint64_t>(*in_++) << fill_;
      fill_ += 8;
    }
    const uint64_t v = acc_ & ((uint64_t{1} << bits) - 1);
    acc_ >>= bits;
    fill_ -= bits;
    return v;
  }
  // Bits left in the partially consumed byte must be zero (one valid encoding per message).
  bool rest_is_zero() const { return acc_ == 0; }

 private:
  const uint8_t* in_;
  uint64_t acc_ = 0;
  uint32_t fill_ = 0;
};

}  // namespace atl::algorithms::compress
