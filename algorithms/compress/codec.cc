#include "algorithms/compress/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/core/crc32c.h"
#include "algorithms/compress/bit_pack.h"
#include "algorithms/compress/entropy.h"
#include "algorithms/compress/wire.h"
#include "algorithms/compress/topk.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/lowbit.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms::compress {

namespace fmt = atl::kernels::formats;

namespace {

static_assert(std::endian::native == std::endian::little, "wire format is little-endian");

constexpr char kMagic[4] = {'A', 'T', 'L', 'C'};
constexpr size_t kMaxSpecBytes = 128;
// Inputs beyond this magnitude are rejected: scales times codes must stay finite on decode.
constexpr float kMaxAbsInput = 1e38f;

// ---- sizes ----------------------------------------------------------------------------------

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Bits per index for positions in [0, range).
uint32_t index_bits(uint64_t range) {
  return range <= 1 ? 1u : static_cast<uint32_t>(std::bit_width(range - 1));
}

uint64_t index_section_bytes(const CodecSpec& s, uint64_t n) {
  switch (s.sparsifier) {
    case Sparsifier::kDense: return 0;
    case Sparsifier::kTopk: return ceil_div(kept_count(s, n) * index_bits(n), 8);
    case Sparsifier::kTopkChunked:
      return ceil_div(kept_count(s, n) * index_bits(std::min<uint64_t>(s.chunk, n)), 8);
  }
  return 0;
}

uint64_t value_section_bytes(const CodecSpec& s, uint64_t m) {
  const uint64_t b = static_cast<uint64_t>(s.block);
  switch (s.quantizer) {
    case Quantizer::kFp32: return 4 * m;
    case Quantizer::kBf16:
    case Quantizer::kFp16: return 2 * m;
    case Quantizer::kFp8: return 4 + m;  // fp32 tensor scale + E4M3 codes
    case Quantizer::kMxfp8: return ceil_div(m, 32) * sizeof(fmt::BlockMxfp8);
    case Quantizer::kMxfp4: return ceil_div(m, 32) * sizeof(fmt::BlockMxfp4);
    case Quantizer::kNvfp4: return 4 + ceil_div(m, 16) * sizeof(fmt::BlockNvfp4);
    case Quantizer::kInt8: return ceil_div(m, b) * (4 + b);
    case Quantizer::kInt4:
    case Quantizer::kInt3: return ceil_div(m, b) * (4 + b / 2);
    case Quantizer::kSign: return ceil_div(m, b) * (2 + b / 8);
    case Quantizer::kTernary: return ceil_div(m, b) * (2 + ceil_div(b, 5));
  }
  return 0;
}

// ---- value sections ----------------------------------------------------------------------------

// Runs fn(values_chunk, block_chunk) over chunks of kChunkValues values through a stack buffer,
// copying the blocks to/from unaligned wire bytes.
constexpr size_t kChunkValues = 4096;

// Per-chunk work of the encoder around each chunk's quantization: the input chunk is validated
// (when no tensor-wide pass was needed for a scale) and the bytes it became are folded into the
// message CRC while still in L1. The encoder so reads its input from memory once and never
// rereads its output: one pass instead of three (validate, quantize, checksum).
struct ChunkSink {
  bool validate = false;  // check each input chunk: finite and |x| <= kMaxAbsInput
  bool bad = false;       // a chunk failed the check; encoding stopped there
  uint32_t crc = 0;       // CRC-32C of the message bytes before `pending`
  // Written bytes not yet in crc: the checksum runs over 32 KiB at a time (still in L1/L2),
  // where crc32c_extend interleaves three streams; a chunk's 1-4 KiB alone take one.
  const uint8_t* pending = nullptr;
  size_t pending_bytes = 0;
  static constexpr size_t kCrcBatch = 32 * 1024;

  bool before(std::span<const float> part) {
    if (!validate) return true;
    const fmt::AbsMax am = fmt::abs_max(part);
    bad = !am.all_finite || am.amax > kMaxAbsInput;
    return !bad;
  }
  // bytes: n bytes just written to the message, right after the previous call's.
  void after(const uint8_t* bytes, size_t n) {
    if (pending == nullptr) pending = bytes;
    pending_bytes += n;
    if (pending_bytes >= kCrcBatch) flush();
  }
  // The CRC of every byte passed to after(); call once the section is written.
  uint32_t flush() {
    crc = crc32c_extend(crc, pending, pending_bytes);
    pending = nullptr;
    pending_bytes = 0;
    return crc;
  }
};

template <typename Block, size_t kPerBlock, typename Fn>
void encode_blocks(std::span<const float> v, uint8_t* out, ChunkSink& sink, Fn fn) {
  constexpr size_t kBlocks = kChunkValues / kPerBlock;
  Block tmp[kBlocks];
  for (size_t i = 0; i < v.size(); i += kChunkValues) {
    const auto part = v.subspan(i, std::min(kChunkValues, v.size() - i));
    if (!sink.before(part)) return;
    const size_t nb = ceil_div(part.size(), kPerBlock);
    fn(part, std::span<Block>(tmp, nb));
    std::memcpy(out, tmp, nb * sizeof(Block));
    sink.after(out, nb * sizeof(Block));
    out += nb * sizeof(Block);
  }
}

template <typename Block, size_t kPerBlock, typename Fn>
void decode_blocks(const uint8_t* in, std::span<float> v, Fn fn) {
  constexpr size_t kBlocks = kChunkValues / kPerBlock;
  Block tmp[kBlocks];
  for (size_t i = 0; i < v.size(); i += kChunkValues) {
    const auto part = v.subspan(i, std::min(kChunkValues, v.size() - i));
    const size_t nb = ceil_div(part.size(), kPerBlock);
    std::memcpy(tmp, in, nb * sizeof(Block));
    in += nb * sizeof(Block);
    fn(std::span<const Block>(tmp, nb), part);
  }
}

template <int B>
void encode_int(const CodecSpec& s, std::span<const float> v, uint8_t* out, ChunkSink& sink) {
  if (s.quantizer == Quantizer::kInt8) {
    encode_blocks<fmt::BlockQ8<B>, B>(v, out, sink,
                                      [](auto in, auto o) { fmt::quantize_q8<B>(in, o); });
  } else if (s.quantizer == Quantizer::kInt3) {
    encode_blocks<fmt::BlockQ4<B>, B>(v, out, sink,
                                      [](auto in, auto o) { fmt::quantize_q3<B>(in, o); });
  } else {
    encode_blocks<fmt::BlockQ4<B>, B>(v, out, sink,
                                      [](auto in, auto o) { fmt::quantize_q4<B>(in, o); });
  }
}
template <int B>
void decode_int(const CodecSpec& s, const uint8_t* in, std::span<float> v) {
  if (s.quantizer == Quantizer::kInt8) {
    decode_blocks<fmt::BlockQ8<B>, B>(in, v, [](auto i, auto o) { fmt::dequantize_q8<B>(i, o); });
  } else {
    decode_blocks<fmt::BlockQ4<B>, B>(in, v, [](auto i, auto o) { fmt::dequantize_q4<B>(i, o); });
  }
}

template <int B>
void encode_lowbit(const CodecSpec& s, std::span<const float> v, uint8_t* out, ChunkSink& sink) {
  if (s.quantizer == Quantizer::kSign) {
    encode_blocks<fmt::BlockSign<B>, B>(v, out, sink,
                                        [](auto in, auto o) { fmt::quantize_sign<B>(in, o); });
  } else {
    encode_blocks<fmt::BlockTernary<B>, B>(
        v, out, sink, [](auto in, auto o) { fmt::quantize_ternary<B>(in, o); });
  }
}
// False when a block is not a valid encoding (lowbit.h).
template <int B>
bool decode_lowbit(const CodecSpec& s, const uint8_t* in, std::span<float> v) {
  bool ok = true;
  if (s.quantizer == Quantizer::kSign) {
    decode_blocks<fmt::BlockSign<B>, B>(
        in, v, [&ok](auto i, auto o) { ok &= fmt::dequantize_sign<B>(i, o); });
  } else {
    decode_blocks<fmt::BlockTernary<B>, B>(
        in, v, [&ok](auto i, auto o) { ok &= fmt::dequantize_ternary<B>(i, o); });
  }
  return ok;
}

// Elementwise formats through a stack buffer of codes.
template <typename Code, typename Fn>
void encode_elems(std::span<const float> v, uint8_t* out, ChunkSink& sink, Fn fn) {
  Code tmp[kChunkValues];
  for (size_t i = 0; i < v.size(); i += kChunkValues) {
    const size_t n = std::min(kChunkValues, v.size() - i);
    if (!sink.before(v.subspan(i, n))) return;
    fn(v.subspan(i, n), std::span<Code>(tmp, n));
    std::memcpy(out + i * sizeof(Code), tmp, n * sizeof(Code));
    sink.after(out + i * sizeof(Code), n * sizeof(Code));
  }
}
template <typename Code, typename Fn>
void decode_elems(const uint8_t* in, std::span<float> v, Fn fn) {
  Code tmp[kChunkValues];
  for (size_t i = 0; i < v.size(); i += kChunkValues) {
    const size_t n = std::min(kChunkValues, v.size() - i);
    std::memcpy(tmp, in + i * sizeof(Code), n * sizeof(Code));
    fn(std::span<const Code>(tmp, n), v.subspan(i, n));
  }
}

float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Quantizers whose scale depends on the whole tensor's amax (computed in a pass of its own);
// the others validate their input chunk by chunk as they go.
bool needs_tensor_amax(Quantizer q) { return q == Quantizer::kFp8 || q == Quantizer::kNvfp4; }

// Bytes before the first block or code of a value section: the fp32 tensor scale of fp8 and
// nvfp4 (derived from the tensor's amax), nothing for the others.
size_t value_prefix_bytes(const CodecSpec& s) {
  return s.quantizer == Quantizer::kFp8 || s.quantizer == Quantizer::kNvfp4 ? 4 : 0;
}
// fp8: the per-tensor scale that maps amax to E4M3's max.
float fp8_scale(float amax) { return amax > 0 ? amax / fmt::kE4M3Max : 1.0f; }

// Byte offset of value `first` inside a value section's body (after the prefix). first is a
// multiple of kChunkValues (so of every block size) or the section's end.
uint64_t value_body_offset(const CodecSpec& s, uint64_t first) {
  return value_section_bytes(s, first) - value_prefix_bytes(s);
}

// Writes the value section's prefix for a tensor of this amax; returns its length.
size_t encode_value_prefix(const CodecSpec& s, float amax, uint8_t* out) {
  if (s.quantizer == Quantizer::kFp8) {
    const float scale = fp8_scale(amax);
    std::memcpy(out, &scale, 4);
  } else if (s.quantizer == Quantizer::kNvfp4) {
    const float ts = fmt::nvfp4_tensor_scale(amax);
    std::memcpy(out, &ts, 4);
  }
  return value_prefix_bytes(s);
}

// v (a run of a tensor's values starting at a multiple of kChunkValues) -> its bytes of the
// value section body, at out. amax is the whole tensor's (fp8 and nvfp4 scale by it; the tensor
// was validated); the other quantizers validate through the sink.
void encode_value_body(const CodecSpec& s, std::span<const float> v, float amax, uint8_t* out,
                       ChunkSink& sink) {
  switch (s.quantizer) {
    case Quantizer::kFp32:
      encode_elems<float>(v, out, sink,
                          [](auto in, auto o) { std::copy(in.begin(), in.end(), o.begin()); });
      return;
    case Quantizer::kBf16:
      // bf16 has fp32's range; nothing below kMaxAbsInput rounds to inf.
      encode_elems<uint16_t>(v, out, sink, [](auto in, auto o) { fmt::quantize_bf16(in, o); });
      return;
    case Quantizer::kFp16:
      encode_elems<uint16_t>(v, out, sink, [](auto in, auto o) {
        fmt::quantize_fp16(in, o, fmt::Overflow::kSaturate);
      });
      return;
    case Quantizer::kFp8: {
      const float inv = amax > 0 ? fmt::kE4M3Max / amax : 1.0f;
      encode_elems<uint8_t>(v, out, sink, [inv](auto in, auto o) {
        fmt::quantize_e4m3_scaled(in, std::isfinite(inv) ? inv : 0.0f, o);
      });
      return;
    }
    case Quantizer::kMxfp8:
      encode_blocks<fmt::BlockMxfp8, 32>(v, out, sink,
                                         [](auto in, auto o) { fmt::quantize_mxfp8(in, o); });
      return;
    case Quantizer::kMxfp4:
      encode_blocks<fmt::BlockMxfp4, 32>(v, out, sink,
                                         [](auto in, auto o) { fmt::quantize_mxfp4(in, o); });
      return;
    case Quantizer::kNvfp4: {
      const float ts = fmt::nvfp4_tensor_scale(amax);
      encode_blocks<fmt::BlockNvfp4, 16>(v, out, sink, [ts](auto in, auto o) {
        fmt::quantize_nvfp4(in, ts, o);
      });
      return;
    }
    case Quantizer::kInt8:
    case Quantizer::kInt4:
    case Quantizer::kInt3:
      switch (s.block) {
        case 32: return encode_int<32>(s, v, out, sink);
        case 64: return encode_int<64>(s, v, out, sink);
        case 128: return encode_int<128>(s, v, out, sink);
        default: return encode_int<256>(s, v, out, sink);
      }
    case Quantizer::kSign:
    case Quantizer::kTernary:
      switch (s.block) {
        case 32: return encode_lowbit<32>(s, v, out, sink);
        case 64: return encode_lowbit<64>(s, v, out, sink);
        case 128: return encode_lowbit<128>(s, v, out, sink);
        default: return encode_lowbit<256>(s, v, out, sink);
      }
  }
}

// Work is split in slices of kSliceValues values (a multiple of kChunkValues, so every slice
// starts on a block and a chunk boundary): the bytes of a slice do not depend on how many threads
// there are, and neither does the message CRC (the slices' CRCs are combined in order).
constexpr size_t kSliceValues = 64 * kChunkValues;  // 1 MiB of fp32

size_t slice_count(size_t n) { return n == 0 ? 1 : static_cast<size_t>(ceil_div(n, kSliceValues)); }

// v (m values) -> value_section_bytes(s, m) bytes at out, over up to `threads` threads; extends
// crc by those bytes. validate: check every value (finite, |x| <= kMaxAbsInput) on the way;
// false when one failed (out then holds a partial section). amax as for encode_value_body.
bool encode_value_section(const CodecSpec& s, std::span<const float> v, float amax, bool validate,
                          uint8_t* out, uint32_t& crc, int threads) {
  const size_t prefix = encode_value_prefix(s, amax, out);
  crc = crc32c_extend(crc, out, prefix);
  uint8_t* body = out + prefix;
  const size_t slices = slice_count(v.size());
  if (threads <= 1 || slices == 1) {
    ChunkSink sink{validate, false, crc};
    encode_value_body(s, v, amax, body, sink);
    crc = sink.flush();
    return !sink.bad;
  }
  std::vector<uint32_t> slice_crc(slices);
  std::vector<uint8_t> slice_bad(slices);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < slices; ++i) {
    const size_t first = i * kSliceValues;
    ChunkSink sink{validate, false, 0};
    encode_value_body(s, v.subspan(first, std::min(kSliceValues, v.size() - first)), amax,
                      body + value_body_offset(s, first), sink);
    slice_crc[i] = sink.flush();
    slice_bad[i] = sink.bad;
  }
  for (size_t i = 0; i < slices; ++i) {
    if (slice_bad[i]) return false;
    const size_t first = i * kSliceValues, end = std::min(v.size(), first + kSliceValues);
    crc = crc32c_combine(crc, slice_crc[i], value_body_offset(s, end) - value_body_offset(s, first));
  }
  return true;
}

// abs_max over up to `threads` threads (max and "all finite" combine in any order).
fmt::AbsMax abs_max_threaded(std::span<const float> v, int threads) {
  const size_t slices = slice_count(v.size());
  if (threads <= 1 || slices == 1) return fmt::abs_max(v);
  std::vector<fmt::AbsMax> part(slices);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < slices; ++i) {
    const size_t first = i * kSliceValues;
    part[i] = fmt::abs_max(v.subspan(first, std::min(kSliceValues, v.size() - first)));
  }
  fmt::AbsMax all;
  for (const fmt::AbsMax& p : part) {
    all.amax = std::max(all.amax, p.amax);
    all.all_finite = all.all_finite && p.all_finite;
  }
  return all;
}

// CRC-32C of n bytes over up to `threads` threads (parts combined in order).
uint32_t crc32c_threaded(uint32_t crc, const uint8_t* data, size_t n, int threads) {
  constexpr size_t kPart = size_t{1} << 20;
  const size_t parts = n == 0 ? 1 : (n + kPart - 1) / kPart;
  if (threads <= 1 || parts == 1) return crc32c_extend(crc, data, n);
  std::vector<uint32_t> part_crc(parts);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < parts; ++i) {
    part_crc[i] = crc32c(data + i * kPart, std::min(kPart, n - i * kPart));
  }
  for (size_t i = 0; i < parts; ++i) {
    crc = crc32c_combine(crc, part_crc[i], std::min(kPart, n - i * kPart));
  }
  return crc;
}

uint32_t message_crc_threaded(std::span<const uint8_t> msg, int threads) {
  return crc32c_threaded(crc32c(msg.data(), 24), msg.data() + 28, msg.size() - 28, threads);
}

Status check_input(const fmt::AbsMax& am) {
  if (!am.all_finite) return InvalidArgument("codec: input has NaN or infinite values");
  if (am.amax > kMaxAbsInput) return InvalidArgument("codec: input has |x| > 1e38");
  return Status::Ok();
}

// The body bytes of a run of values starting at a multiple of kChunkValues -> v. prefix: the
// section's prefix (fp8 / nvfp4 scale). False when the codes themselves are invalid (only sign /
// ternary have invalid codes); finiteness is the caller's check.
bool decode_value_body(const CodecSpec& s, const uint8_t* prefix, const uint8_t* in,
                       std::span<float> v) {
  switch (s.quantizer) {
    case Quantizer::kFp32:
      std::memcpy(v.data(), in, v.size() * 4);
      return true;
    case Quantizer::kBf16:
      decode_elems<uint16_t>(in, v, [](auto i, auto o) { fmt::dequantize_bf16(i, o); });
      return true;
    case Quantizer::kFp16:
      decode_elems<uint16_t>(in, v, [](auto i, auto o) { fmt::dequantize_fp16(i, o); });
      return true;
    case Quantizer::kFp8: {
      const float scale = load_f32(prefix);
      decode_elems<uint8_t>(in, v, [scale](auto i, auto o) {
        fmt::dequantize_e4m3_scaled(i, scale, o);
      });
      return true;
    }
    case Quantizer::kMxfp8:
      decode_blocks<fmt::BlockMxfp8, 32>(in, v, [](auto i, auto o) { fmt::dequantize_mxfp8(i, o); });
      return true;
    case Quantizer::kMxfp4:
      decode_blocks<fmt::BlockMxfp4, 32>(in, v, [](auto i, auto o) { fmt::dequantize_mxfp4(i, o); });
      return true;
    case Quantizer::kNvfp4: {
      const float ts = load_f32(prefix);
      decode_blocks<fmt::BlockNvfp4, 16>(in, v, [ts](auto i, auto o) {
        fmt::dequantize_nvfp4(i, ts, o);
      });
      return true;
    }
    case Quantizer::kInt8:
    case Quantizer::kInt4:
    case Quantizer::kInt3:
      switch (s.block) {
        case 32: decode_int<32>(s, in, v); return true;
        case 64: decode_int<64>(s, in, v); return true;
        case 128: decode_int<128>(s, in, v); return true;
        default: decode_int<256>(s, in, v); return true;
      }
    case Quantizer::kSign:
    case Quantizer::kTernary:
      switch (s.block) {
        case 32: return decode_lowbit<32>(s, in, v);
        case 64: return decode_lowbit<64>(s, in, v);
        case 128: return decode_lowbit<128>(s, in, v);
        default: return decode_lowbit<256>(s, in, v);
      }
  }
  return true;
}

bool all_finite(std::span<const float> v) {
  uint32_t bad = 0;
  for (float x : v) bad |= (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

enum class BodyCheck : uint8_t { kOk, kBadCodes, kNonFinite };

// value_section_bytes(s, m) bytes at in -> v (m values), over up to `threads` threads, with the
// checks of a decoder: invalid codes first (any slice), then non-finite values.
BodyCheck decode_value_section(const CodecSpec& s, const uint8_t* in, std::span<float> v,
                               int threads) {
  const uint8_t* body = in + value_prefix_bytes(s);
  const size_t slices = slice_count(v.size());
  auto run = [&](size_t i) {
    const size_t first = i * kSliceValues;
    const auto part = v.subspan(first, std::min(kSliceValues, v.size() - first));
    if (!decode_value_body(s, in, body + value_body_offset(s, first), part)) {
      return BodyCheck::kBadCodes;
    }
    return all_finite(part) ? BodyCheck::kOk : BodyCheck::kNonFinite;
  };
  std::vector<BodyCheck> result(slices);
  if (threads <= 1 || slices == 1) {
    for (size_t i = 0; i < slices; ++i) result[i] = run(i);
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < slices; ++i) result[i] = run(i);
  }
  BodyCheck worst = BodyCheck::kOk;
  for (BodyCheck r : result) {
    if (r == BodyCheck::kBadCodes) return r;
    if (r == BodyCheck::kNonFinite) worst = r;
  }
  return worst;
}


struct Parsed {
  CodecSpec spec;
  std::span<const uint8_t> payload;
};

StatusOr<Parsed> parse_message(std::span<const uint8_t> bytes, uint64_t numel, int threads) {
  if (bytes.size() < kHeaderBytes) {
    return DataLoss("codec message truncated: " + std::to_string(bytes.size()) +
                    " bytes, the header alone is 32");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return DataLoss("not a codec message (bad magic)");
  const uint16_t version = load<uint16_t>(p + 4);
  if (version != kCodecVersion) {
    return InvalidArgument("codec message version " + std::to_string(version) +
                           " is not supported (this build reads version 1)");
  }
  const uint16_t spec_len = load<uint16_t>(p + 6);
  const uint64_t declared_numel = load<uint64_t>(p + 8);
  const uint64_t payload_len = load<uint64_t>(p + 16);
  if (spec_len == 0 || spec_len > kMaxSpecBytes) return DataLoss("codec message: bad spec length");
  if (load<uint32_t>(p + 28) != 0) return DataLoss("codec message: reserved field is not zero");
  if (bytes.size() < kHeaderBytes + spec_len ||
      bytes.size() - kHeaderBytes - spec_len != payload_len) {
    return DataLoss("codec message: length " + std::to_string(bytes.size()) +
                    " does not match its header");
  }
  if (load<uint32_t>(p + 24) != message_crc_threaded(bytes, threads)) {
    return DataLoss("codec message: bad checksum");
  }
  if (declared_numel != numel) {
    return InvalidArgument("codec message holds " + std::to_string(declared_numel) +
                           " values, expected " + std::to_string(numel));
  }
  auto spec = parse_spec(std::string_view(reinterpret_cast<const char*>(p + kHeaderBytes), spec_len));
  if (!spec.ok()) return DataLoss("codec message: " + spec.status().message());
  if (spec->sparsifier == Sparsifier::kTopk && numel >= (uint64_t{1} << 32)) {
    return InvalidArgument("codec message: exact top-k over 2^32 or more values");
  }
  // The payload's size is fixed by the spec, or with "+zstd" bounded by its frames' worst case.
  const uint64_t implied = spec->zstd ? zstd_max_frame_bytes(payload_bytes(*spec, numel))
                                      : payload_bytes(*spec, numel);
  if (spec->zstd ? payload_len > implied : payload_len != implied) {
    return DataLoss("codec message: payload of " + std::to_string(payload_len) +
                    " bytes, spec " + spec->to_string() + " implies " +
                    (spec->zstd ? "zstd frames of at most " : "") + std::to_string(implied));
  }
  return Parsed{*spec, bytes.subspan(kHeaderBytes + spec_len)};
}

constexpr const char* kBadCodes =
    "codec message: invalid sign/ternary block (negative scale or a code byte out of range)";

// Reads the k indices of a sparse payload into idx (chunked: local to their chunk).
Status read_indices(const CodecSpec& s, const uint8_t* payload, uint64_t n, std::vector<uint32_t>& idx) {
  const uint64_t k = idx.size();
  BitReader br(payload);
  if (s.sparsifier == Sparsifier::kTopk) {
    const uint32_t w = index_bits(n);
    for (uint64_t j = 0; j < k; ++j) {
      const uint64_t i = br.get(w);
      if (i >= n || (j > 0 && i <= idx[j - 1])) {
        return DataLoss("codec message: top-k indices not strictly increasing and in range");
      }
      idx[j] = static_cast<uint32_t>(i);
    }
  } else {
    const uint64_t chunk = s.chunk;
    const uint32_t w = index_bits(std::min<uint64_t>(chunk, n));
    uint64_t j = 0;
    for (uint64_t base = 0; base < n; base += chunk) {
      const uint64_t len = std::min(chunk, n - base);
      const uint64_t kc = kept_in(s.fraction, len);
      uint64_t prev = 0;
      for (uint64_t t = 0; t < kc; ++t, ++j) {
        const uint64_t i = br.get(w);
        if (i >= len || (t > 0 && i <= prev)) {
          return DataLoss("codec message: chunked top-k indices not increasing and in range");
        }
        prev = i;
        idx[j] = static_cast<uint32_t>(i);
      }
    }
  }
  if (!br.rest_is_zero()) return DataLoss("codec message: nonzero padding after indices");
  return Status::Ok();
}

Status body_status(BodyCheck check) {
  switch (check) {
    case BodyCheck::kOk: return Status::Ok();
    case BodyCheck::kBadCodes: return DataLoss(kBadCodes);
    case BodyCheck::kNonFinite: return DataLoss("codec message decodes to non-finite values");
  }
  return Status::Ok();
}

// The header and spec text of a message (all but its CRC, written last) at p.
void write_header(uint8_t* p, const std::string& spec_text, uint64_t numel, uint64_t payload) {
  std::memcpy(p, kMagic, 4);
  store<uint16_t>(p + 4, kCodecVersion);
  store<uint16_t>(p + 6, static_cast<uint16_t>(spec_text.size()));
  store<uint64_t>(p + 8, numel);
  store<uint64_t>(p + 16, payload);
  store<uint32_t>(p + 28, 0);
  std::memcpy(p + kHeaderBytes, spec_text.data(), spec_text.size());
}

// The stages before the entropy stage: what a "+zstd" payload expands to is their payload.
CodecSpec without_zstd(CodecSpec s) {
  s.zstd = false;
  return s;
}

Status decode_payload(const CodecSpec& s, std::span<const uint8_t> payload, std::span<float> out,
                      int threads) {
  const uint64_t n = out.size();
  if (s.zstd) {
    // Expanded into a buffer of the size the spec and the caller's numel imply, never a size the
    // message chose. Not kept across calls: a coordinator decodes on as many threads as pushes
    // arrive at once, and the buffer (about n/2 bytes for 4-bit codes) is small next to the n
    // floats the caller holds.
    const CodecSpec inner = without_zstd(s);
    std::vector<uint8_t> raw(payload_bytes(inner, n));
    ATOLL_RETURN_IF_ERROR(zstd_expand(payload, raw, threads));
    return decode_payload(inner, raw, out, threads);
  }
  if (s.sparsifier == Sparsifier::kDense) {
    return body_status(decode_value_section(s, payload.data(), out, threads));
  }
  const uint64_t k = kept_count(s, n);
  std::vector<uint32_t> idx(k);
  ATOLL_RETURN_IF_ERROR(read_indices(s, payload.data(), n, idx));
  std::vector<float> vals(k);
  ATOLL_RETURN_IF_ERROR(body_status(
      decode_value_section(s, payload.data() + index_section_bytes(s, n), vals, threads)));
  std::fill(out.begin(), out.end(), 0.0f);
  if (s.sparsifier == Sparsifier::kTopk) {
    for (uint64_t j = 0; j < k; ++j) out[idx[j]] = vals[j];
  } else {
    uint64_t j = 0;
    for (uint64_t base = 0; base < n; base += s.chunk) {
      const uint64_t kc = kept_in(s.fraction, std::min<uint64_t>(s.chunk, n - base));
      for (uint64_t t = 0; t < kc; ++t, ++j) out[base + idx[j]] = vals[j];
    }
  }
  return Status::Ok();
}

// Largest |x| the encoders accept, as fp32 bits with the sign cleared: a magnitude above it is
// too large, or inf, or NaN (their bit patterns are larger still).
constexpr uint32_t kMaxAbsInputBits = std::bit_cast<uint32_t>(kMaxAbsInput);

// Chunked top-k: the indices (w bits each) of every chunk into out, and the kept values, in
// order, into vals (kept_count of them). Chunks go in slices of a multiple of 8 chunks: every
// full chunk keeps the same count kc, so a slice's index bits start on a byte boundary and
// slices write disjoint bytes (the bytes do not depend on threads). Returns the largest
// magnitude of the values as fp32 bits (the selection finds it on the way; it validates them).
uint32_t select_chunked(const CodecSpec& s, std::span<const float> values, uint8_t* out,
                        float* vals, int threads, TopkScratch& caller_scratch) {
  const uint64_t n = values.size(), chunk = s.chunk;
  const uint32_t w = index_bits(std::min<uint64_t>(chunk, n));
  const uint64_t kc = kept_in(s.fraction, std::min<uint64_t>(chunk, n));  // full chunks
  const uint64_t chunks = ceil_div(n, chunk);
  const uint64_t per_slice = 8 * std::max<uint64_t>(1, kSliceValues / (8 * chunk));
  const uint64_t slices = ceil_div(chunks, per_slice);
  auto run = [&](uint64_t sl, TopkScratch& scratch, std::vector<uint32_t>& idx) {
    const uint64_t c0 = sl * per_slice;
    BitWriter bw(out + c0 * kc * w / 8);
    uint64_t v = c0 * kc;
    uint32_t top = 0;
    for (uint64_t c = c0; c < std::min(chunks, c0 + per_slice); ++c) {
      const auto part = values.subspan(c * chunk, std::min(chunk, n - c * chunk));
      const uint64_t kept = kept_in(s.fraction, part.size());
      const auto next = c + 1 < chunks ? values.subspan((c + 1) * chunk).first(
                                             std::min(chunk, n - (c + 1) * chunk))
                                       : std::span<const float>();
      idx.resize(kept);
      top = std::max(top, topk_select(part, kept, scratch, idx.data(), vals + v, next));
      for (uint32_t i : idx) bw.put(i, w);
      v += kept;
    }
    bw.flush();
    return top;
  };
  uint32_t top = 0;
  if (threads <= 1 || slices == 1) {
    std::vector<uint32_t> idx;
    for (uint64_t sl = 0; sl < slices; ++sl) top = std::max(top, run(sl, caller_scratch, idx));
    return top;
  }
  std::vector<uint32_t> slice_top(slices);
#pragma omp parallel num_threads(threads)
  {
    TopkScratch scratch;
    std::vector<uint32_t> idx;
#pragma omp for schedule(static)
    for (uint64_t sl = 0; sl < slices; ++sl) slice_top[sl] = run(sl, scratch, idx);
  }
  for (uint32_t t : slice_top) top = std::max(top, t);
  return top;
}

// Buffers of the sparse encoder, kept by each thread across messages: real rounds encode
// tensors of the same sizes every round, and fresh arrays of a few MB per message (indices,
// kept values, the selection's candidates) cost page faults that are as slow as the selection
// itself. A thread so holds about 16 bytes per kept value of the largest message it encoded.
struct SparseBuffers {
  TopkScratch topk;
  std::vector<uint32_t> index;  // exact top-k's kept indices
  std::vector<float> vals;      // the kept values, in index order
};
SparseBuffers& sparse_buffers() {
  thread_local SparseBuffers buffers;
  return buffers;
}

// Sparse payload: indices, then the kept values through the quantizer. False (out partial) when
// an input value is not finite or above kMaxAbsInput: the selection sees every value, and that
// check rides along with it.
bool encode_sparse(const CodecSpec& s, std::span<const float> values, uint8_t* out, int threads) {
  const uint64_t n = values.size();
  const uint64_t k = kept_count(s, n);
  SparseBuffers& b = sparse_buffers();
  b.vals.resize(k);
  uint32_t top = 0;
  if (s.sparsifier == Sparsifier::kTopk) {
    b.index.resize(k);
    top = topk_select(values, k, b.topk, b.index.data(), b.vals.data());
    if (top > kMaxAbsInputBits) return false;
    const uint32_t w = index_bits(n);
    BitWriter bw(out);
    for (uint64_t j = 0; j < k; ++j) bw.put(b.index[j], w);
    bw.flush();
  } else {
    top = select_chunked(s, values, out, b.vals.data(), threads, b.topk);
    if (top > kMaxAbsInputBits) return false;
  }
  const std::span<const float> vals(b.vals.data(), k);
  const float vmax = abs_max_threaded(vals, threads).amax;
  uint32_t unused_crc = 0;  // the (small) message is checksummed as a whole afterwards
  encode_value_section(s, vals, vmax, false, out + index_section_bytes(s, n), unused_crc, threads);
  return true;
}

}  // namespace

uint64_t payload_bytes(const CodecSpec& spec, uint64_t numel) {
  return index_section_bytes(spec, numel) + value_section_bytes(spec, kept_count(spec, numel));
}

uint64_t max_encoded_bytes(const CodecSpec& spec, uint64_t numel) {
  const uint64_t payload = payload_bytes(spec, numel);
  return kHeaderBytes + spec.to_string().size() +
         (spec.zstd ? zstd_max_frame_bytes(payload) : payload);
}

uint64_t encoded_bytes(const CodecSpec& spec, uint64_t numel) {
  return kHeaderBytes + spec.to_string().size() + payload_bytes(spec, numel);
}

StatusOr<double> bits_per_value(std::string_view spec_text, uint64_t numel) {
  auto spec = parse_spec(spec_text);
  if (!spec.ok()) return spec.status();
  if (numel == 0) return InvalidArgument("bits_per_value: numel must be positive");
  return 8.0 * static_cast<double>(encoded_bytes(*spec, numel)) / static_cast<double>(numel);
}

StatusOr<Codec> Codec::create(std::string_view spec_text) {
  auto spec = parse_spec(spec_text);
  if (!spec.ok()) return spec.status();
  return Codec(*spec);
}

StatusOr<std::vector<uint8_t>> Codec::encode(std::span<const float> values) const {
  std::vector<uint8_t> msg;
  ATOLL_RETURN_IF_ERROR(encode_into(values, msg));
  return msg;
}

Status Codec::encode_into(std::span<const float> values, std::vector<uint8_t>& msg) const {
  const int threads = threads_;
  const uint64_t n = values.size();
  if (spec_.zstd) {
    // The message of the stages before zstd, in a buffer each thread keeps, then its payload as
    // zstd frames (one per 1 MiB part) behind this spec's header.
    thread_local std::vector<uint8_t> inner_msg;
    const CodecSpec inner = without_zstd(spec_);
    if (Status s = Codec(inner).set_threads(threads).encode_into(values, inner_msg); !s.ok()) {
      msg.clear();
      return s;
    }
    const std::string spec_text = spec_.to_string();
    const size_t inner_head = kHeaderBytes + inner.to_string().size();
    msg.resize(kHeaderBytes + spec_text.size());
    zstd_append(std::span<const uint8_t>(inner_msg).subspan(inner_head), msg, threads);
    uint8_t* p = msg.data();
    write_header(p, spec_text, n, msg.size() - kHeaderBytes - spec_text.size());
    store<uint32_t>(p + 24, message_crc_threaded(msg, threads));
    return Status::Ok();
  }
  if (n > kMaxNumel) return InvalidArgument("codec: more than 2^36 values");
  if (spec_.sparsifier == Sparsifier::kTopk && n >= (uint64_t{1} << 32)) {
    return InvalidArgument("codec: exact top-k needs fewer than 2^32 values; use topk-chunked");
  }
  const bool dense = spec_.sparsifier == Sparsifier::kDense;
  // A separate validation pass only where a tensor-wide scale needs the values checked first;
  // dense block and elementwise codecs validate chunk by chunk, top-k in its selection.
  float amax = 0.0f;
  if (dense && needs_tensor_amax(spec_.quantizer)) {
    const fmt::AbsMax am = abs_max_threaded(values, threads);
    if (Status bad = check_input(am); !bad.ok()) {
      msg.clear();  // no message rather than the last one left in a reused buffer
      return bad;
    }
    amax = am.amax;
  }

  const std::string spec_text = spec_.to_string();
  const uint64_t payload = payload_bytes(spec_, n);
  msg.resize(kHeaderBytes + spec_text.size() + payload);
  uint8_t* p = msg.data();
  write_header(p, spec_text, n, payload);
  uint8_t* out = p + kHeaderBytes + spec_text.size();

  if (dense) {
    uint32_t crc = crc32c_extend(crc32c(p, 24), p + 28, out - (p + 28));
    const bool validate = !needs_tensor_amax(spec_.quantizer);
    if (!encode_value_section(spec_, values, amax, validate, out, crc, threads)) {
      p[0] = 0;  // no magic: the partial bytes (and a CRC left from a reused buffer) never parse
      return check_input(fmt::abs_max(values));  // which check failed, for the message
    }
    store<uint32_t>(p + 24, crc);
  } else {
    if (!encode_sparse(spec_, values, out, threads)) {
      p[0] = 0;  // as above
      return check_input(fmt::abs_max(values));  // which check failed, for the message
    }
    store<uint32_t>(p + 24, message_crc_threaded(msg, threads));
  }
  return Status::Ok();
}

Status Codec::decode_into(std::span<const uint8_t> bytes, std::span<float> out) const {
  const int threads = threads_;
  auto parsed = parse_message(bytes, out.size(), threads);
  if (!parsed.ok()) return parsed.status();
  if (!(parsed->spec == spec_)) {
    return InvalidArgument("codec message was encoded with '" + parsed->spec.to_string() +
                           "', expected '" + spec_.to_string() + "'");
  }
  return decode_payload(parsed->spec, parsed->payload, out, threads);
}

StatusOr<std::vector<float>> Codec::decode(std::span<const uint8_t> bytes, uint64_t numel) const {
  if (numel > kMaxNumel) return InvalidArgument("codec: more than 2^36 values");
  std::vector<float> out(numel);
  ATOLL_RETURN_IF_ERROR(decode_into(bytes, out));
  return out;
}

Status decode_into(std::span<const uint8_t> bytes, std::span<float> out, int threads) {
  auto parsed = parse_message(bytes, out.size(), threads);
  if (!parsed.ok()) return parsed.status();
  return decode_payload(parsed->spec, parsed->payload, out, threads);
}

StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, uint64_t numel, int threads) {
  if (numel > kMaxNumel) return InvalidArgument("codec: more than 2^36 values");
  std::vector<float> out(numel);
  ATOLL_RETURN_IF_ERROR(decode_into(bytes, out, threads));
  return out;
}

}  // namespace atl::algorithms::compress
