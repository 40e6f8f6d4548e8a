// Codec output pinned by digest: every codec's message bytes, and the values they decode to, on
// fixed inputs. Committed bench rows and θ fingerprints of runs with a codec depend on these
// exact bytes, so a faster encoder or decoder must reproduce them bit for bit. A change here is
// a change of the wire format (a new codec version), never a refactoring.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "kernels/core/philox.h"

namespace atl::algorithms::compress {
namespace {

// FNV-1a, 64-bit, over bytes.
uint64_t fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// A pseudo-gradient with what the encoders have to get right: magnitudes from 1e-8 to 10 that
// change every 1000 values (not aligned to any block or chunk), spikes, exact zeros, runs of
// equal magnitudes of both signs (top-k ties), subnormals and values exactly on rounding
// boundaries of the formats (multiples of 2^-k).
std::vector<float> digest_input(size_t n, uint64_t seed) {
  const Philox normals(seed, 1), picks(seed, 2), scales(seed, 3);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double scale = std::pow(10.0, -8.0 + 9.0 * scales.uniform_double(i / 1000));
    const uint32_t r = picks.u32(i);
    float v = static_cast<float>(normals.normal(i) * scale);
    switch (r % 64) {
      case 0: v = 0.0f; break;
      case 1: v *= 10.0f; break;
      case 2: v = (r & 64) ? 0.25f : -0.25f; break;              // ties for top-k
      case 3: v = std::ldexp(1.0f, -130) * ((r & 64) ? 1 : -1); break;  // subnormal
      case 4: v = std::ldexp(static_cast<float>(r >> 24), -6); break;    // on a binary grid
      default: break;
    }
    x[i] = v;
  }
  return x;
}

struct Pinned {
  const char* spec;
  uint64_t encoded;  // fnv1a of the message
  uint64_t decoded;  // fnv1a of the decoded fp32 values
};

// n = 300007 (73 chunks of 4096 and a partial one; partial blocks for every block size).
const Pinned kLarge[] = {
    {"fp32", 0x18853d418372ab4ull, 0x9bdc77d1be1fe700ull},
    {"bf16", 0x3373f81e34fd4ae5ull, 0x6942a95b700e61b0ull},
    {"fp16", 0xda67893979ce7a0eull, 0x7e10de35529ba1c4ull},
    {"fp8", 0x9f82a4eefa48d267ull, 0xfe3dc757fc24523bull},
    {"mxfp8", 0xa8c926ea171f8baaull, 0x952729e57fe9854cull},
    {"mxfp4", 0x35cea8faf5e29032ull, 0xa31098be8dc55d59ull},
    {"nvfp4", 0x727d9b67e045fc77ull, 0xdc43f78525923423ull},
    {"int8", 0x8692355d2298b2d5ull, 0xe2fc79d25d63a87cull},
    {"int8:64", 0x43a8ccc2e8c886a5ull, 0x99fef171584f6f6aull},
    {"int8:128", 0x7acc823865d84326ull, 0x2dac81f66c8f8a6dull},
    {"int8:256", 0xd3e2bc746f7dfbc0ull, 0x9d532a7879911754ull},
    {"int4", 0x9698c731cbfd6fa3ull, 0xde3fe54c175c687cull},
    {"int4:64", 0xee7ff17a45038075ull, 0x41d0e7c98996ba04ull},
    {"int4:128", 0x9f0b4ca03f44f4c6ull, 0x8f8571461a726b69ull},
    {"int4:256", 0x6a04e33d80f460dfull, 0xf23a36a681f03461ull},
    {"sign", 0x130d5a47ef2892afull, 0x4215b29d03303bd1ull},
    {"sign:32", 0xac6843c9b0e6ed96ull, 0x53431c423a484096ull},
    {"sign:64", 0x9fd03d1c5df81a2full, 0x1cca72b17c5f7f68ull},
    {"sign:256", 0x4d09b93682e5535bull, 0xab104051aef237dcull},
    {"ternary", 0x84486fe7d826d90full, 0xc6e060b2e9b3d05full},
    {"ternary:32", 0x28c14bf9ca4e7e32ull, 0x7c32a1b5a18b6b9eull},
    {"ternary:64", 0xa854225b0e8bd850ull, 0x1770a6444a58140aull},
    {"ternary:256", 0x75e2b847ff07fe54ull, 0xd8aac7e966702dc5ull},
    {"topk:0.02", 0xf456a65fd38cea5dull, 0x2840b753107f8f9eull},
    {"topk:0.02+int4", 0x5ddfb343e944e97eull, 0xf99b37214d331cd8ull},
    {"topk:0.01+nvfp4", 0xba4ffc4a474034e0ull, 0x26994bc0246a8fb1ull},
    {"topk:0.1+bf16", 0x463576a385195e8eull, 0x16f4e1ef5d677ebull},
    {"topk:0.3+fp8", 0x8c035e43aecbff69ull, 0xa888a6f93f0d2a3aull},
    {"topk-chunked:0.02+int4", 0x9cd666a4024aac5cull, 0x3acc61c4cd31bf9full},
    {"topk-chunked:0.015625:4096+sign", 0x89d275940a040091ull, 0xa9bc88e356d50d05ull},
    {"topk-chunked:0.01:8192+nvfp4", 0x53a3863b5dfb73b7ull, 0x388871ac2ab86356ull},
    {"topk-chunked:0.05:1000+ternary", 0x43d3cb29733b96d7ull, 0x9ead73907d59ce49ull},
    {"topk-chunked:0.5:16+mxfp4", 0x7979c0663d8b9054ull, 0xc82a2fcae4cecafull},
};

// n = 1000: less than one chunk.
const Pinned kSmall[] = {
    {"bf16", 0xd9291d3c044ad46aull, 0xb185d6e104971306ull},
    {"fp8", 0x45fbb2349043401ull, 0x12003d54dd77501aull},
    {"mxfp4", 0x8cbbb248239b25a4ull, 0x23797dbbc9b17d8ull},
    {"nvfp4", 0x8a4e06297496175cull, 0x584e200b11160760ull},
    {"int8", 0xa9fe10fe3458144cull, 0x57786a015e59c573ull},
    {"int4:256", 0x913e663e87d16bc4ull, 0xf7bd1241d7470a9eull},
    {"sign", 0x14227b51d63089c8ull, 0xd948cfaae8002d25ull},
    {"ternary:32", 0x5461d381d4f77c4eull, 0xffc9daedfaa65e0ull},
    {"topk:0.02+int4", 0x9b8cb068321017b3ull, 0x99cafa59cd02cf81ull},
    {"topk-chunked:0.1:128+mxfp8", 0x4fa5519ac01dd341ull, 0xd71bbe1fe99d601full},
};

void check_digests(const Pinned* table, size_t rows, size_t n) {
  const std::vector<float> x = digest_input(n, 20261202);
  for (size_t r = 0; r < rows; ++r) {
    const Pinned& p = table[r];
    auto codec = Codec::create(p.spec);
    ASSERT_TRUE(codec.ok()) << p.spec;
    auto msg = codec->encode(x);
    ASSERT_TRUE(msg.ok()) << p.spec << ": " << msg.status().to_string();
    auto y = codec->decode(*msg, n);
    ASSERT_TRUE(y.ok()) << p.spec << ": " << y.status().to_string();
    const uint64_t enc = fnv1a(msg->data(), msg->size());
    const uint64_t dec = fnv1a(y->data(), y->size() * sizeof(float));
    EXPECT_EQ(enc, p.encoded) << p.spec << " n " << n << ": {\"" << p.spec << "\", 0x" << std::hex
                              << enc << "ull, 0x" << dec << "ull},";
    EXPECT_EQ(dec, p.decoded) << p.spec << " n " << n << ": decoded values changed";
  }
}

TEST(CompressCodecDigest, EveryCodecsBytesArePinned) {
  check_digests(kLarge, std::size(kLarge), 300007);
  check_digests(kSmall, std::size(kSmall), 1000);
}

// Encode and decode split over threads give the same message and the same values as one thread
// (the pinned digests above), for every thread count: same config and seed, same bits.
TEST(CompressCodecDigest, ThreadCountNeverChangesTheBytes) {
  const size_t n = 3 * 262144 + 12345;  // three full slices of work and a partial one
  const std::vector<float> x = digest_input(n, 7);
  for (const Pinned& p : kLarge) {
    auto codec = Codec::create(p.spec);
    ASSERT_TRUE(codec.ok()) << p.spec;
    auto one = codec->encode(x);
    ASSERT_TRUE(one.ok()) << p.spec << ": " << one.status().to_string();
    auto y_one = codec->decode(*one, n);
    ASSERT_TRUE(y_one.ok()) << p.spec;
    for (int threads : {2, 3}) {
      codec->set_threads(threads);
      auto many = codec->encode(x);
      ASSERT_TRUE(many.ok()) << p.spec << " threads " << threads;
      EXPECT_TRUE(*many == *one) << p.spec << ": message differs with " << threads << " threads";
      auto y = codec->decode(*one, n);
      ASSERT_TRUE(y.ok()) << p.spec << " threads " << threads << ": " << y.status().to_string();
      EXPECT_EQ(0, std::memcmp(y->data(), y_one->data(), n * sizeof(float)))
          << p.spec << ": decoded values differ with " << threads << " threads";
      std::vector<float> z(n);  // the free decoder, split the same way
      ASSERT_TRUE(decode_into(*one, z, threads).ok());
      EXPECT_EQ(0, std::memcmp(z.data(), y_one->data(), n * sizeof(float))) << p.spec;
    }
    codec->set_threads(1);
  }
}

// A threaded decoder reports the same error as one thread: a non-finite value in one slice.
TEST(CompressCodecDigest, ThreadedEncoderRejectsNonFiniteInAnySlice) {
  const size_t n = 3 * 262144;
  std::vector<float> x = digest_input(n, 3);
  x[2 * 262144 + 5] = std::numeric_limits<float>::quiet_NaN();
  for (const char* spec : {"int8", "nvfp4", "topk-chunked:0.02+int4", "topk:0.01"}) {
    auto codec = Codec::create(spec);
    ASSERT_TRUE(codec.ok());
    for (int threads : {1, 4}) {
      codec->set_threads(threads);
      auto msg = codec->encode(x);
      ASSERT_FALSE(msg.ok()) << spec << " threads " << threads;
      EXPECT_NE(msg.status().message().find("NaN"), std::string::npos) << msg.status().message();
    }
  }
}

}  // namespace
}  // namespace atl::algorithms::compress
