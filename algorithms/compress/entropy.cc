#include "algorithms/compress/entropy.h"

#include <zstd.h>

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

}  // namespace

void zstd_append(std::span<const uint8_t> raw, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + ZSTD_compressBound(raw.size()));
  const size_t n =
      ZSTD_compress2(compress_context(), out.data() + at, out.size() - at, raw.data(), raw.size());
  // Into a buffer of ZSTD_compressBound bytes with valid parameters zstd cannot fail; a failure
  // here is a broken library, not bad input.
  ATOLL_CHECK(!ZSTD_isError(n), ZSTD_getErrorName(n));
  out.resize(at + n);
}

uint64_t zstd_max_frame_bytes(uint64_t raw_bytes) { return ZSTD_compressBound(raw_bytes); }

Status zstd_expand(std::span<const uint8_t> frame, std::span<uint8_t> raw) {
  const size_t frame_bytes = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_bytes)) {
    return DataLoss(std::string("codec message: the zstd payload is not a frame (") +
                    ZSTD_getErrorName(frame_bytes) + ")");
  }
  if (frame_bytes != frame.size()) {
    return DataLoss("codec message: " + std::to_string(frame.size() - frame_bytes) +
                    " bytes after the zstd frame");
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (declared != raw.size()) {
    return DataLoss("codec message: the zstd frame does not hold the " +
                    std::to_string(raw.size()) + " payload bytes its spec implies");
  }
  const size_t n = ZSTD_decompressDCtx(decompress_context(), raw.data(), raw.size(), frame.data(),
                                       frame.size());
  if (ZSTD_isError(n)) {
    return DataLoss(std::string("codec message: bad zstd frame (") + ZSTD_getErrorName(n) + ")");
  }
  if (n != raw.size()) {
    return DataLoss("codec message: the zstd frame expands to " + std::to_string(n) +
                    " bytes, its spec implies " + std::to_string(raw.size()));
  }
  return Status::Ok();
}

}  // namespace atl::algorithms::compress
