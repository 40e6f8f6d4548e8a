#include "algorithms/compress/entropy.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/core/check.h"

namespace atl::algorithms::compress {
namespace {

// Level 1: on 4-bit codes the literals' Huffman coding is all that pays, and levels 3 and 9
// give the same size or larger (bench/RESULTS.md, "Entropy stage") at a fraction of the speed.
constexpr int kLevel = 1;

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One context per thread, reused across messages (a context holds its tables, ~1 MB at level 1).
ZSTD_CCtx* compress_context() {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> ctx;
  if (!ctx) {
    ctx.reset(ZSTD_createCCtx());
    ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_compressionLevel, kLevel);
    ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_checksumFlag, 0);  // the message has its CRC-32C
    ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_dictIDFlag, 0);
  }
  return ctx.get();
}
ZSTD_DCtx* decompress_context() {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> ctx;
  if (!ctx) ctx.reset(ZSTD_createDCtx());
  return ctx.get();
}

size_t part_count(uint64_t raw_bytes) {
  return raw_bytes == 0 ? 1 : static_cast<size_t>((raw_bytes + kZstdPartBytes - 1) / kZstdPartBytes);
}
// Bytes of part i of a payload of raw_bytes (the last part is the shorter one).
size_t part_size(uint64_t raw_bytes, size_t i) {
  return static_cast<size_t>(std::min<uint64_t>(kZstdPartBytes, raw_bytes - i * kZstdPartBytes));
}
template <typename Byte>
std::span<Byte> part_of(std::span<Byte> raw, size_t i) {
  return raw.subspan(i * kZstdPartBytes, part_size(raw.size(), i));
}

// One part -> its frame at dst (room for ZSTD_compressBound(part) bytes); returns its size.
size_t compress_part(std::span<const uint8_t> part, uint8_t* dst) {
  const size_t n = ZSTD_compress2(compress_context(), dst, ZSTD_compressBound(part.size()),
                                  part.data(), part.size());
  // Into a buffer of ZSTD_compressBound bytes with valid parameters zstd cannot fail; a failure
  // here is a broken library, not bad input.
  ATOLL_CHECK(!ZSTD_isError(n), ZSTD_getErrorName(n));
  return n;
}

}  // namespace

void zstd_append(std::span<const uint8_t> raw, std::vector<uint8_t>& out, int threads) {
  // Every part compresses into its own worst-case slot of out, side by side; the frames are then
  // moved down to close the gaps (a copy of the compressed bytes only). out's capacity is reused
  // across messages, so the slots cost no fresh pages.
  const size_t parts = part_count(raw.size());
  const size_t slot = ZSTD_compressBound(kZstdPartBytes);
  const size_t at = out.size();
  out.resize(at + zstd_max_frame_bytes(raw.size()));
  std::vector<size_t> size(parts);
#pragma omp parallel for num_threads(std::max(threads, 1)) if (threads > 1 && parts > 1) \
    schedule(static)
  for (size_t i = 0; i < parts; ++i) size[i] = compress_part(part_of(raw, i), out.data() + at + i * slot);
  size_t end = at;
  for (size_t i = 0; i < parts; ++i) {
    std::memmove(out.data() + end, out.data() + at + i * slot, size[i]);
    end += size[i];
  }
  out.resize(end);
}

uint64_t zstd_max_frame_bytes(uint64_t raw_bytes) {
  const uint64_t full = raw_bytes / kZstdPartBytes, tail = raw_bytes % kZstdPartBytes;
  return full * ZSTD_compressBound(kZstdPartBytes) +
         (tail > 0 || full == 0 ? ZSTD_compressBound(tail) : 0);
}

Status zstd_expand(std::span<const uint8_t> frames, std::span<uint8_t> raw, int threads) {
  // Find every part's frame first (zstd reads the frame and block headers only), checking that
  // each records its part's size, then expand the parts side by side.
  const size_t parts = part_count(raw.size());
  std::vector<std::span<const uint8_t>> frame(parts);
  size_t at = 0;
  for (size_t i = 0; i < parts; ++i) {
    const auto rest = frames.subspan(at);
    const size_t bytes = ZSTD_findFrameCompressedSize(rest.data(), rest.size());
    if (ZSTD_isError(bytes)) {
      return DataLoss("codec message: zstd frame " + std::to_string(i + 1) + " of " +
                      std::to_string(parts) + " is not a frame (" + ZSTD_getErrorName(bytes) +
                      ")");
    }
    frame[i] = rest.first(bytes);
    if (ZSTD_getFrameContentSize(frame[i].data(), frame[i].size()) != part_size(raw.size(), i)) {
      return DataLoss("codec message: zstd frame " + std::to_string(i + 1) + " of " +
                      std::to_string(parts) + " does not hold the " +
                      std::to_string(part_size(raw.size(), i)) + " payload bytes its spec implies");
    }
    at += bytes;
  }
  if (at != frames.size()) {
    return DataLoss("codec message: " + std::to_string(frames.size() - at) +
                    " bytes after the last zstd frame");
  }
  std::vector<size_t> got(parts);
#pragma omp parallel for num_threads(std::max(threads, 1)) if (threads > 1 && parts > 1) \
    schedule(static)
  for (size_t i = 0; i < parts; ++i) {
    const std::span<uint8_t> part = part_of(raw, i);
    got[i] = ZSTD_decompressDCtx(decompress_context(), part.data(), part.size(), frame[i].data(),
                                 frame[i].size());
  }
  for (size_t i = 0; i < parts; ++i) {
    const size_t want = part_size(raw.size(), i);
    if (ZSTD_isError(got[i])) {
      return DataLoss("codec message: bad zstd frame " + std::to_string(i + 1) + " (" +
                      ZSTD_getErrorName(got[i]) + ")");
    }
    if (got[i] != want) {
      return DataLoss("codec message: zstd frame " + std::to_string(i + 1) + " expands to " +
                      std::to_string(got[i]) + " bytes, its spec implies " +
                      std::to_string(want));
    }
  }
  return Status::Ok();
}

}  // namespace atl::algorithms::compress
