#include "transport/tensor_stream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/core/crc32c.h"
#include "kernels/core/heap_policy.h"
#include "kernels/core/sha256.h"
#include "tests/tools/vm_flags.h"

namespace atl::transport {
namespace {

using atoll_pb::v1::TensorChunk;
using atoll_pb::v1::TensorHeader;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TensorHeader test_header() {
  TensorHeader h;
  h.set_experiment_id("exp");
  h.set_round(3);
  h.set_codec("bytes");
  return h;
}

std::vector<TensorChunk> chunks_of(const std::string& payload, size_t chunk = kMaxChunkBytes) {
  auto chunks = chunk_payload(test_header(), payload, chunk);
  EXPECT_TRUE(chunks.ok()) << chunks.status().to_string();
  return std::move(chunks).value();
}

Status assemble(const std::vector<TensorChunk>& chunks, uint64_t max, std::string* out = nullptr) {
  ChunkAssembler a(max);
  for (const auto& c : chunks) ATOLL_RETURN_IF_ERROR(a.add(c));
  ATOLL_RETURN_IF_ERROR(a.finish());
  if (out) *out = a.take_payload();
  return Status::Ok();
}

constexpr uint64_t kLimit = 64ull << 20;

TEST(TensorStream, RoundTripSizes) {
  for (size_t n : {size_t{0}, size_t{1}, kMaxChunkBytes, kMaxChunkBytes + 1, 5 * kMaxChunkBytes}) {
    const std::string payload = random_bytes(n, n);
    auto chunks = chunks_of(payload);
    const size_t expected_chunks = n == 0 ? 1 : (n + kMaxChunkBytes - 1) / kMaxChunkBytes;
    ASSERT_EQ(chunks.size(), expected_chunks) << n;
    ASSERT_TRUE(chunks[0].has_header());
    EXPECT_EQ(chunks[0].header().payload_bytes(), n);
    EXPECT_EQ(chunks[0].header().wire_version(), kWireVersion);
    EXPECT_EQ(chunks[0].header().payload_xxh3(), payload_digest(payload));
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_LE(chunks[i].data().size(), kMaxChunkBytes);
      EXPECT_EQ(chunks[i].has_header(), i == 0);
      // Each chunk must also fit the gRPC message bound with its header.
      EXPECT_LT(chunks[i].ByteSizeLong(), kMaxChunkBytes + 4096);
    }
    ChunkAssembler a(kLimit);
    for (const auto& c : chunks) ASSERT_TRUE(a.add(c).ok()) << n;
    ASSERT_TRUE(a.finish().ok()) << n;
    EXPECT_EQ(a.header().experiment_id(), "exp");
    EXPECT_EQ(a.header().round(), 3u);
    EXPECT_EQ(a.take_payload(), payload) << n;
  }
}

TEST(TensorStream, SmallChunksRoundTrip) {
  const std::string payload = random_bytes(1000, 1);
  auto chunks = chunks_of(payload, 7);
  EXPECT_EQ(chunks.size(), 143u);
  std::string out;
  ASSERT_TRUE(assemble(chunks, kLimit, &out).ok());
  EXPECT_EQ(out, payload);
  EXPECT_FALSE(chunk_payload(test_header(), payload, 0).ok());
  EXPECT_FALSE(chunk_payload(test_header(), payload, kMaxChunkBytes + 1).ok());
}

TEST(TensorStream, RejectsFlippedBit) {
  const std::string payload = random_bytes(3 * kMaxChunkBytes / 2, 2);
  auto chunks = chunks_of(payload);
  std::string& data = *chunks[1].mutable_data();
  data[12345] ^= 0x10;
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("CRC-32C mismatch"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsFlippedBitWithMatchingCrc) {
  // A sender that computes the CRC over corrupted data: only the payload digest can catch it.
  const std::string payload = random_bytes(1000, 3);
  auto chunks = chunks_of(payload, 100);
  std::string& data = *chunks[4].mutable_data();
  data[0] ^= 1;
  chunks[4].set_crc32c(crc32c_extend_portable(0, data.data(), data.size()));
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("XXH3-128 mismatch"), std::string::npos) << st.message();
}

TEST(TensorStream, CorruptedChunkUnderAnUnchangedDigestIsRefusedInOneLine) {
  // Bytes changed inside a chunk after the sender's digest was taken (a bug between hashing and
  // sending), with the chunk's CRC-32C taken over the changed bytes, so that every per-chunk
  // check passes: the payload digest in the header, left as it was, refuses the stream.
  const std::string payload = random_bytes(3 * kMaxChunkBytes + 10, 21);
  auto chunks = chunks_of(payload);
  const std::string digest = chunks[0].header().payload_xxh3();
  std::string& data = *chunks[2].mutable_data();
  data[kMaxChunkBytes / 2] = static_cast<char>(data[kMaxChunkBytes / 2] + 1);
  chunks[2].set_crc32c(crc32c(data));
  ASSERT_EQ(chunks[0].header().payload_xxh3(), digest);

  ChunkAssembler a(kLimit);
  for (const auto& c : chunks) ASSERT_TRUE(a.add(c).ok());  // each chunk looks right
  const Status st = a.finish();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  const std::string& m = st.message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.rfind("tensor stream payload XXH3-128 mismatch (computed ", 0), 0u) << m;
  EXPECT_NE(m.find("header says " +
                   to_hex(reinterpret_cast<const uint8_t*>(digest.data()), digest.size())),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("corrupted"), std::string::npos) << m;
  // Refused for good: nothing of the payload is handed out, later calls repeat the verdict.
  EXPECT_EQ(a.finish().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(a.take_payload().empty());
}

TEST(TensorStream, PayloadDigestIsXxh3128InCanonicalOrder) {
  // Reference values of XXH3-128 (seed 0), big-endian high then low 64 bits: the empty input
  // and "abc"; a streamed digest equals the one-shot digest at any split.
  EXPECT_EQ(to_hex(reinterpret_cast<const uint8_t*>(payload_digest("").data()), 16),
            "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(to_hex(reinterpret_cast<const uint8_t*>(payload_digest("abc").data()), 16),
            "06b05ab6733a618578af5f94892f3950");
  const std::string bytes = random_bytes(5000, 22);
  for (size_t split : {size_t{0}, size_t{1}, size_t{240}, size_t{4999}, size_t{5000}}) {
    PayloadHasher h;
    h.update(bytes.data(), split);
    h.update(bytes.data() + split, bytes.size() - split);
    EXPECT_EQ(h.finish(), payload_digest(bytes)) << split;
  }
  EXPECT_NE(payload_digest(bytes), payload_digest(bytes.substr(1)));
}

TEST(TensorStream, RejectsMissingChunk) {
  auto chunks = chunks_of(random_bytes(3 * kMaxChunkBytes, 4));
  chunks.erase(chunks.begin() + 1);
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsMissingLastChunk) {
  auto chunks = chunks_of(random_bytes(3 * kMaxChunkBytes, 5));
  chunks.pop_back();
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("ended after"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsReorderedChunk) {
  auto chunks = chunks_of(random_bytes(4 * kMaxChunkBytes, 6));
  std::swap(chunks[1], chunks[2]);
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  // chunk 2 arrives first: a gap.
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsDuplicatedChunk) {
  auto chunks = chunks_of(random_bytes(3 * kMaxChunkBytes, 7));
  chunks.insert(chunks.begin() + 2, chunks[1]);
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("reordered or duplicated"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsOversizeDeclarationBeforeAllocating) {
  TensorChunk c;
  TensorHeader* h = c.mutable_header();
  h->set_wire_version(kWireVersion);
  h->set_payload_bytes(std::numeric_limits<uint64_t>::max());  // would throw if reserved
  h->set_payload_xxh3(std::string(kPayloadDigestBytes, '\0'));
  ChunkAssembler a(kLimit);
  Status st = a.add(c);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("exceeds the limit"), std::string::npos) << st.message();
  // Sticky.
  EXPECT_EQ(a.finish().code(), StatusCode::kOutOfRange);

  auto chunks = chunks_of(random_bytes(2 * kMaxChunkBytes, 8));
  EXPECT_EQ(assemble(chunks, 2 * kMaxChunkBytes - 1).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(assemble(chunks, 2 * kMaxChunkBytes).ok());
}

TEST(TensorStream, RejectsSecondHeader) {
  auto chunks = chunks_of(random_bytes(2 * kMaxChunkBytes, 9));
  *chunks[1].mutable_header() = chunks[0].header();
  Status st = assemble(chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("second header"), std::string::npos) << st.message();
}

TEST(TensorStream, RejectsMissingHeaderAndBadFields) {
  auto chunks = chunks_of(random_bytes(100, 10));
  TensorChunk no_header = chunks[0];
  no_header.clear_header();
  ChunkAssembler a(kLimit);
  EXPECT_EQ(a.add(no_header).code(), StatusCode::kInvalidArgument);

  // A peer of the previous wire version (a SHA-256 payload check) and one of a later version.
  for (uint32_t other : {kWireVersion - 1, kWireVersion + 1}) {
    TensorChunk bad_version = chunks[0];
    bad_version.mutable_header()->set_wire_version(other);
    ChunkAssembler b(kLimit);
    const Status v = b.add(bad_version);
    EXPECT_EQ(v.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(v.message(), "tensor stream chunk 0: unsupported wire_version " +
                               std::to_string(other) + " (this build speaks " +
                               std::to_string(kWireVersion) + ")");
  }
  Status st;

  TensorChunk bad_digest = chunks[0];
  bad_digest.mutable_header()->set_payload_xxh3("xyz");
  ChunkAssembler c(kLimit);
  st = c.add(bad_digest);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("payload_xxh3 has 3 bytes, not 16"), std::string::npos)
      << st.message();
  TensorChunk no_digest = chunks[0];
  no_digest.mutable_header()->clear_payload_xxh3();
  ChunkAssembler d(kLimit);
  EXPECT_EQ(d.add(no_digest).code(), StatusCode::kInvalidArgument);

  ChunkAssembler empty(kLimit);
  EXPECT_EQ(empty.finish().code(), StatusCode::kInvalidArgument);
}

TEST(TensorStream, RejectsOversizeChunkAndDataPastEnd) {
  const std::string payload = random_bytes(kMaxChunkBytes + 1, 11);
  TensorHeader h = test_header();
  h.set_wire_version(kWireVersion);
  h.set_payload_bytes(payload.size());
  h.set_payload_xxh3(payload_digest(payload));
  TensorChunk big;
  *big.mutable_header() = h;
  big.set_data(payload);
  big.set_crc32c(crc32c(payload));
  ChunkAssembler a(kLimit);
  Status st = a.add(big);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("chunk limit"), std::string::npos) << st.message();

  auto chunks = chunks_of(random_bytes(10, 12));
  chunks[0].mutable_header()->set_payload_bytes(5);
  EXPECT_EQ(assemble(chunks, kLimit).code(), StatusCode::kOutOfRange);
}

TEST(TensorStream, CodecNoneNeedsConsistentNumel) {
  std::vector<float> v = {1.f, 2.f, 3.f};
  const std::string bytes = floats_to_bytes(v);
  TensorHeader h = test_header();
  h.set_codec("none");
  h.set_numel(4);  // wrong: 3 floats
  auto chunks = chunk_payload(h, bytes);
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ(assemble(*chunks, kLimit).code(), StatusCode::kInvalidArgument);
  h.set_numel(3);
  chunks = chunk_payload(h, bytes);
  ASSERT_TRUE(chunks.ok());
  EXPECT_TRUE(assemble(*chunks, kLimit).ok());
}

TEST(TensorStream, SenderKnownDigestIsKeptAndStillChecked) {
  const std::string payload = random_bytes(3 * kMaxChunkBytes / 2, 11);
  TensorHeader h = test_header();
  h.set_payload_xxh3(payload_digest(payload));
  auto chunks = chunk_payload(h, payload);
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ((*chunks)[0].header().payload_xxh3(), h.payload_xxh3());
  std::string out;
  ASSERT_TRUE(assemble(*chunks, kLimit, &out).ok());
  EXPECT_EQ(out, payload);
  // A sender that vouches for the wrong digest is caught by the receiver.
  const std::string other = random_bytes(16, 12);
  h.set_payload_xxh3(payload_digest(other));
  chunks = chunk_payload(h, payload);
  ASSERT_TRUE(chunks.ok());
  Status st = assemble(*chunks, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("XXH3-128 mismatch"), std::string::npos) << st.message();
}

TEST(TensorStream, AssemblesIntoAGivenBufferThatFits) {
  const std::string first = random_bytes(3 * kMaxChunkBytes / 2, 13);
  ChunkAssembler a(kLimit);
  for (const auto& c : chunks_of(first)) ASSERT_TRUE(a.add(c).ok());
  ASSERT_TRUE(a.finish().ok());
  std::string buffer = a.take_payload();
  const char* memory = buffer.data();
  // The next, smaller stream lands in the same memory; the old bytes are gone.
  const std::string second = random_bytes(kMaxChunkBytes + 7, 14);
  ChunkAssembler b(kLimit, std::move(buffer));
  for (const auto& c : chunks_of(second)) ASSERT_TRUE(b.add(c).ok());
  ASSERT_TRUE(b.finish().ok());
  std::string got = b.take_payload();
  EXPECT_EQ(got.data(), memory);
  EXPECT_EQ(got, second);
  // A buffer too small is replaced; the payload is right all the same.
  ChunkAssembler c(kLimit, std::string(10, 'x'));
  for (const auto& ch : chunks_of(first)) ASSERT_TRUE(c.add(ch).ok());
  ASSERT_TRUE(c.finish().ok());
  EXPECT_EQ(c.take_payload(), first);
}

// A receive buffer is made once and reused, so huge pages would only change its first touch,
// which on a VM whose host takes free 2 MiB blocks back costs 3-5x more in huge pages: it is
// advised into 4 KiB pages, even where `new` advises huge ones for every other large block.
TEST(TensorStream, ReceiveBuffersAreAdvisedIntoSmallPagesWhereLargeBlocksGetHugeOnes) {
  if (!testing::kernel_has_huge_pages()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  struct AdviceOn {
    AdviceOn() { set_huge_page_advice(true); }
    ~AdviceOn() { set_huge_page_advice(false); }
  } advice_on;
  constexpr size_t kBytes = size_t{64} << 20;  // 64 MiB: a large block for `new`
  std::string plain;
  plain.reserve(kBytes);
  const char* plain_middle = plain.data() + kBytes / 2;
  EXPECT_TRUE(testing::advised_huge(plain_middle)) << testing::vm_flags_of(plain_middle);
  std::string buffer;
  reserve_receive_buffer(buffer, kBytes);
  ASSERT_GE(buffer.capacity(), kBytes);
  const char* middle = buffer.data() + kBytes / 2;
  EXPECT_TRUE(testing::advised_small(middle)) << testing::vm_flags_of(middle);
  EXPECT_FALSE(testing::advised_huge(middle)) << testing::vm_flags_of(middle);
}

TEST(TensorStream, LargePayloadIsCheckedWholeAfterFailuresAndDrops) {
  const size_t n = 11 * kMaxChunkBytes + 5;
  const std::string payload = random_bytes(n, 15);
  auto chunks = chunks_of(payload);
  std::string out;
  ASSERT_TRUE(assemble(chunks, kLimit, &out).ok());
  EXPECT_EQ(out, payload);

  // One bit flipped in a late chunk by a sender that computed its CRC afterwards: only the
  // payload digest can catch it.
  auto bad = chunks;
  std::string& data = *bad[bad.size() - 2].mutable_data();
  data[77] ^= 4;
  bad[bad.size() - 2].set_crc32c(crc32c_extend_portable(0, data.data(), data.size()));
  Status st = assemble(bad, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("XXH3-128 mismatch"), std::string::npos) << st.message();

  // Failing or being dropped mid-stream.
  auto short_stream = chunks;
  short_stream.pop_back();
  st = assemble(short_stream, kLimit);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  {
    ChunkAssembler dropped(kLimit);
    for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(dropped.add(chunks[i]).ok());
  }
  auto gap = chunks;
  gap.erase(gap.begin() + 5);
  EXPECT_EQ(assemble(gap, kLimit).code(), StatusCode::kDataLoss);
}

TEST(TensorStream, FloatBytesAreLittleEndianAndRoundTrip) {
  std::vector<float> v = {1.0f,
                          -2.5f,
                          0.0f,
                          -0.0f,
                          std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          3.14159265f};
  const std::string bytes = floats_to_bytes(v);
  ASSERT_EQ(bytes.size(), v.size() * 4);
  // 1.0f = 0x3F800000, little-endian on the wire.
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(bytes[2]), 0x80);
  EXPECT_EQ(static_cast<uint8_t>(bytes[3]), 0x3F);
  auto back = bytes_to_floats(bytes);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(std::signbit((*back)[i]), std::signbit(v[i]));
    EXPECT_EQ((*back)[i], v[i]);
  }
  EXPECT_EQ(bytes_to_floats("abcde").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(bytes_to_floats("").ok());
}

}  // namespace
}  // namespace atl::transport
