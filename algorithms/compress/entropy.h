// The codecs' lossless entropy stage ("+zstd" in a codec spec): a payload's bytes in zstd
// frames. Quantized codes are far from uniform (4-bit codes of a pseudo-gradient carry about 3.3
// bits of information), and zstd's Huffman-coded literals take most of that difference.
//
// Each frame records its part's size; the decoder learns the sizes they must have from the codec
// spec and the caller's numel instead, and refuses any frame that disagrees, so a message can
// never make the decoder allocate or write more than that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::compress {

// A payload is cut in parts of kZstdPartBytes (the last one shorter; an empty payload is one
// empty part), each compressed as its own frame, the frames back to back: threads compress and
// expand parts side by side, and the bytes do not depend on how many threads there are.
inline constexpr size_t kZstdPartBytes = size_t{1} << 20;

// Appends the frames holding `raw` to out, over up to `threads` threads. Deterministic for a
// given zstd library: the same bytes give the same frames (level 1, no checksum, content size
// recorded).
void zstd_append(std::span<const uint8_t> raw, std::vector<uint8_t>& out, int threads = 1);

// frames (exactly the frames of raw's parts, nothing after them) -> raw, which must be exactly
// their size. DataLoss naming what is wrong otherwise.
Status zstd_expand(std::span<const uint8_t> frames, std::span<uint8_t> raw, int threads = 1);

// Most bytes the frames of raw_bytes may take (zstd's bound per part; a larger payload is
// refused unread).
uint64_t zstd_max_frame_bytes(uint64_t raw_bytes);

}  // namespace atl::algorithms::compress
