// sparse-delta-exact: the elements of a tensor whose fp32 bits changed against a base the
// receiver already holds, sent as exact fp32 values. For model pulls: a node at version v asks
// for θ_r and, when fewer bytes than the full θ, gets only what changed, and ends with θ_r bit
// for bit (so the SHA-256 fingerprint of the result still proves it).
//
// Two layouts, the encoder takes the smaller one for the data at hand:
//   - indices (mode 0): every changed element as a w-bit index + its fp32 value. Pays off when
//     the changes are scattered (sparse top-k updates).
//   - runs (mode 1): ranges [start, start + len) + the fp32 values of every element in them.
//     Changed elements separated by at most kMergeGap unchanged ones share a run (their values
//     are sent too; still exact). Pays off when the changes are contiguous (Streaming DiLoCo:
//     one fragment of θ changes per sync, the rest is untouched).
//
// Bytes on the wire (little-endian; docs/formats.md):
//   [0,4)   magic "ATLE"        [4,6) version (1)     [6,7) mode (0 indices, 1 runs)
//   [7,8)   index width w = max(1, bit_width(n - 1)) in mode 0, 0 in mode 1
//   [8,16)  numel n             [16,24) count: k changed elements (mode 0) or R runs (mode 1)
//   [24,28) CRC-32C of every byte of the message except these four      [28,32) zero
//   mode 0: [32, 32 + ceil(k w / 8)) indices, strictly increasing, w bits each, LSB first, zero
//           padding bits; then 4 k bytes of fp32 values in index order
//   mode 1: [32, 32 + 16 R) runs as (start u64, length u64), length >= 1, start + length <= n,
//           each run starting after the previous one ends; then 4 Σ length bytes of fp32 values
// Every value is finite. Decoders check all of it (and n against the base) before the output is
// written, so a failed in-place decode leaves the base untouched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::compress::exact_delta {

inline constexpr char kName[] = "sparse-delta-exact";
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 32;
// A gap of this many unchanged elements (16 bytes of values) costs the same as a run header:
// shorter gaps are bridged.
inline constexpr uint64_t kMergeGap = 4;

// What encode() would send, computed in one pass without building the message.
struct Plan {
  uint64_t numel = 0;
  uint64_t changed = 0;     // elements whose fp32 bits differ
  uint64_t runs = 0;        // runs after bridging gaps ≤ kMergeGap
  uint64_t run_values = 0;  // values covered by those runs (≥ changed)
  bool use_runs = false;    // the smaller of the two layouts (indices on a tie)
  uint64_t bytes = 0;       // total message bytes
};
// current.size() must equal base.size() (otherwise the plan has numel 0 and bytes 0).
Plan plan(std::span<const float> current, std::span<const float> base);

// InvalidArgument on a size mismatch or a non-finite current value; base may hold anything.
StatusOr<std::vector<uint8_t>> encode(std::span<const float> current, std::span<const float> base);

// out.size() == base.size(); out may be base itself. On an error out is untouched.
Status decode_into(std::span<const uint8_t> bytes, std::span<const float> base,
                   std::span<float> out);
StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, std::span<const float> base);

}  // namespace atl::algorithms::compress::exact_delta
