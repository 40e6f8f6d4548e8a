#include "kernels/core/crc32c.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace atl {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the classic check value.
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("")), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
  std::string dec(32, '\0');
  for (int i = 0; i < 32; ++i) dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc32c(dec), 0x113FDB5Cu);
}

TEST(Crc32c, PortableMatchesFastPathOnRandomData) {
  std::mt19937_64 rng(7);
  // Lengths around the three-stream threshold (3 x 8192 bytes) exercise the interleaved path,
  // its join and the serial tail.
  for (size_t len :
       {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4097, 24575, 24576, 24577, 49152, 49159, 100003}) {
    for (size_t misalign = 0; misalign < 8; ++misalign) {
      std::vector<uint8_t> buf(len + misalign);
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
      const uint8_t* p = buf.data() + misalign;
      EXPECT_EQ(crc32c(p, len), crc32c_extend_portable(0, p, len))
          << "len " << len << " misalign " << misalign;
    }
  }
  std::printf("crc32c hardware path: %s\n", crc32c_hardware() ? "yes" : "no");
}

TEST(Crc32c, ExtendIsConcatenation) {
  const std::string a = "The quick brown fox ", b = "jumps over the lazy dog";
  EXPECT_EQ(crc32c_extend(crc32c(a), b.data(), b.size()), crc32c(a + b));
  EXPECT_EQ(crc32c_extend_portable(crc32c(a), b.data(), b.size()), crc32c(a + b));
  EXPECT_EQ(crc32c_extend(crc32c("1234", 4), "56789", 5), 0xE3069283u);
}

TEST(Crc32c, CombineMatchesConcatenation) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t split : {0, 1, 13, 4096, 30000, 69999, 70000}) {
    const uint32_t a = crc32c(buf.data(), split);
    const uint32_t b = crc32c(buf.data() + split, buf.size() - split);
    EXPECT_EQ(crc32c_combine(a, b, buf.size() - split), crc32c(buf.data(), buf.size()))
        << "split " << split;
  }
}

}  // namespace
}  // namespace atl
