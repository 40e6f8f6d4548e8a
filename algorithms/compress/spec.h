// Codec pipeline specs: the string an experiment names its pseudo-gradient codec with.
//
//   spec       := ("none" | sparsifier | [sparsifier "+"] quantizer) ["+zstd"]
//   sparsifier := "topk:" F                    exact top-k by |x|, k = max(1, round(F * n))
//               | "topk-chunked:" F [":" C]    top-k per chunk of C values (default 4096)
//   quantizer  := "fp32" | "bf16" | "fp16" | "fp8" | "mxfp8" | "mxfp4" | "nvfp4"
//               | "int8" [":" B] | "int4" [":" B] | "int3" [":" B]
//                                                B in {32, 64, 128, 256}, default 32
//               | "sign" [":" B] | "ternary" [":" B]  B in {32, 64, 128, 256}, default 128
// F is in (0, 1]; C in [16, 2^20]. "none" means fp32, dense. A sparsifier alone sends fp32
// values. Examples: "bf16", "int8:64", "topk:0.02+int4", "topk-chunked:0.01:8192+nvfp4",
// "sign", "ternary:256" (kernels/formats/lowbit.h: 1 and log2(3) bits a value plus a bf16 scale
// per block; in DiLoCo they did best dense without error feedback, bench/RESULTS.md).
// int3 (codes in [-3, 3]) is stored as int4 is, 4 bits a code (kernels/formats/int_block.h): it
// is meant to go before "+zstd", which sends its codes in about 2.1 bits.
// "+zstd" (last, after a sparsifier or quantizer) is a lossless entropy stage over the payload
// those stages make: the same values decode, in fewer bytes where the codes are skewed (4-bit
// codes of a pseudo-gradient: about 3.4 bits a value instead of 4; algorithms/compress/codec.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::algorithms::compress {

enum class Sparsifier : uint8_t { kDense, kTopk, kTopkChunked };
enum class Quantizer : uint8_t { kFp32, kBf16, kFp16, kFp8, kMxfp8, kMxfp4, kNvfp4, kInt8, kInt4,
                                 kSign, kTernary, kInt3 };

struct CodecSpec {
  Sparsifier sparsifier = Sparsifier::kDense;
  double fraction = 1.0;      // topk: fraction of values kept
  uint32_t chunk = 4096;      // topk-chunked: values per chunk
  Quantizer quantizer = Quantizer::kFp32;
  int block = 32;             // int8 / int4 / int3 / sign / ternary block size
  bool zstd = false;          // the payload is zstd-compressed (lossless; "+zstd")

  // Canonical text ("none", "topk:0.02+int4:32"...); parse(to_string()) gives the same spec.
  std::string to_string() const;
  bool operator==(const CodecSpec&) const = default;
};

StatusOr<CodecSpec> parse_spec(std::string_view text);

// Number of values a sparsifier keeps out of n (n for dense). Chunked: sum over chunks.
uint64_t kept_count(const CodecSpec& spec, uint64_t n);
// Kept values in one chunk (or the whole tensor for exact top-k) of len values.
uint64_t kept_in(double fraction, uint64_t len);

}  // namespace atl::algorithms::compress
