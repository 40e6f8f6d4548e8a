// sparse-delta: the elements of a tensor that changed against a base the receiver already holds,
// at bf16 precision. For model pulls: a node at version v asks for θ and gets the elements whose
// bf16 value differs from its own θ_v, which after a few outer steps is a fraction of the tensor.
//
// Element i is sent iff bf16(current[i]) != bf16(base[i]) (compared as bf16 codes), as its index
// and bf16(current[i]). Decoding copies base and overwrites the sent elements, so for every i
//   bf16(decoded[i]) == bf16(current[i]),
// i.e. the result is current at bf16 precision (within one bf16 ulp of current).
//
// Bytes on the wire (little-endian; docs/formats.md):
//   [0,4)   magic "ATLD"        [4,6) version (1)     [6,7) index width w (bits)   [7,8) zero
//   [8,16)  numel n              [16,24) count k of changed elements
//   [24,28) CRC-32C of every byte of the message except these four      [28,32) zero
//   [32, 32 + ceil(k w / 8))     indices, strictly increasing, w = max(1, bit_width(n - 1)) bits
//                                each, LSB first, zero padding bits
//   then 2 k bytes               bf16 codes of the new values, finite
// Decoders trust nothing: magic, version, width, reserved bytes, checksum, n against the base's
// size, k <= n, the exact length, index order and range, padding and finiteness are checked
// before the output is touched, and a failure is a Status, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::compress::sparse_delta {

inline constexpr char kName[] = "sparse-delta";  // codec name in a TensorHeader
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 32;

// Elements that would be sent (bf16 codes differ). current.size() must equal base.size().
uint64_t count_changed(std::span<const float> current, std::span<const float> base);
// Message bytes for n values of which k changed: compare with a dense message to pick one.
uint64_t message_bytes(uint64_t numel, uint64_t changed);

// InvalidArgument on a size mismatch, non-finite current values or |current| so large that bf16
// rounds it to infinity; base may hold anything (it is compared, never sent).
StatusOr<std::vector<uint8_t>> encode(std::span<const float> current, std::span<const float> base);

// out.size() == base.size(); out may be base itself (an in-place update). On an error out is
// untouched.
Status decode_into(std::span<const uint8_t> bytes, std::span<const float> base,
                   std::span<float> out);
StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, std::span<const float> base);

}  // namespace atl::algorithms::compress::sparse_delta
