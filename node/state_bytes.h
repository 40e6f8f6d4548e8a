// The bytes of a saved round state (node/round_state_file.h): little-endian fixed-width integers
// and fp32 arrays, each array preceded by its length. The reader checks every length against
// what is left and against a caller's bound, so a damaged file is an error, never a crash or a
// huge allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace atl::node {

class StateWriter {
 public:
  void u64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_.append(b, 8);
  }
  // n, then n fp32 values (host byte order: the file is read back by the same node).
  void floats(std::span<const float> v) {
    u64(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  void bytes(std::string_view v) {
    u64(v.size());
    out_.append(v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class StateReader {
 public:
  explicit StateReader(std::string_view in) : in_(in) {}
  StatusOr<uint64_t> u64() {
    if (in_.size() - at_ < 8) return truncated();
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(in_[at_ + i])} << (8 * i);
    at_ += 8;
    return v;
  }
  // An array written by StateWriter::floats holding exactly `expect` values.
  StatusOr<std::vector<float>> floats(uint64_t expect) {
    ATOLL_ASSIGN_OR_RETURN(const uint64_t n, u64());
    if (n != expect)
      return InvalidArgument("saved round state: an array of " + std::to_string(n) +
                             " values where " + std::to_string(expect) + " belong");
    if ((in_.size() - at_) / sizeof(float) < n) return truncated();
    std::vector<float> v(n);
    std::memcpy(v.data(), in_.data() + at_, n * sizeof(float));
    at_ += n * sizeof(float);
    return v;
  }
  StatusOr<std::string_view> bytes() {
    ATOLL_ASSIGN_OR_RETURN(const uint64_t n, u64());
    if (in_.size() - at_ < n) return truncated();
    std::string_view v = in_.substr(at_, n);
    at_ += n;
    return v;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  static Status truncated() { return InvalidArgument("saved round state: truncated"); }
  std::string_view in_;
  size_t at_ = 0;
};

}  // namespace atl::node
