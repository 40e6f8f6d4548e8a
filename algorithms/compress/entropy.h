// The codecs' lossless entropy stage ("+zstd" in a codec spec): a payload's bytes in one zstd
// frame. Quantized codes are far from uniform (4-bit codes of a pseudo-gradient carry about 3.3
// bits of information), and zstd's Huffman-coded literals take most of that difference.
//
// The frame records the payload's size; the decoder learns the size it must have from the codec
// spec and the caller's numel instead, and refuses any frame that disagrees, so a message can
// never make the decoder allocate or write more than that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::compress {

// Appends one zstd frame holding `raw` to out. Deterministic for a given zstd library: the same
// bytes give the same frame (level 1, no checksum, content size recorded).
void zstd_append(std::span<const uint8_t> raw, std::vector<uint8_t>& out);

// frame (exactly one zstd frame, nothing after it) -> raw, which must be exactly its size.
// DataLoss naming what is wrong otherwise.
Status zstd_expand(std::span<const uint8_t> frame, std::span<uint8_t> raw);

// Most bytes a frame of raw_bytes may take (zstd's bound; a larger payload is refused unread).
uint64_t zstd_max_frame_bytes(uint64_t raw_bytes);

}  // namespace atl::algorithms::compress
