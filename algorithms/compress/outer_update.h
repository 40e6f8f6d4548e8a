// Compressed broadcast of outer updates (diloco.pull_codec names a codec; docs/coordinator.md
// "Pulls"). The coordinator sends round r's outer update u_r = θ_candidate − θ_r (after the outer
// step) through a lossy codec with its own error feedback e_r, and commits the θ that every node
// holding θ_r rebuilds bit for bit from the message:
//   v = u_r + e_r                      (over the synced range: all of θ, or Streaming DiLoCo's
//   message = encode(v)                 fragment; the other elements do not move)
//   d = decode(message)
//   θ_{r+1} = θ_r + d                  (apply_decoded_update: one fp32 addition per element)
//   e_{r+1} = v − d
// A node applies the same message with apply_update_message: the same decoder on the same bytes
// and the same additions in the same order, so its θ_{r+1} equals the coordinator's.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "algorithms/compress/codec.h"
#include "kernels/core/status.h"

namespace atl::algorithms::compress {

// A pull's TensorHeader.codec for an update message (docs/protocol.md): the payload is a codec
// message applied to the θ named by base_fingerprint at fragment_offset.
inline constexpr std::string_view kOuterUpdateName = "outer-update";

// The elements a round's update covers: θ[offset, offset + numel).
struct UpdateRange {
  uint64_t offset = 0;
  uint64_t numel = 0;
};

// theta: θ_r (numel). candidate: θ after the outer step on input, θ_{r+1} = θ_r + decoded on
// output (elements outside `range` are set to θ_r's). residual: e_r on input, e_{r+1} on output
// (numel; elements outside `range` untouched). Returns the message nodes apply. On an error
// (a non-finite value on the way, a range outside θ) candidate and residual are unspecified.
StatusOr<std::vector<uint8_t>> compress_outer_update(const Codec& codec,
                                                     std::span<const float> theta,
                                                     std::span<float> candidate,
                                                     std::span<float> residual, UpdateRange range);

// out = base, except out[offset + i] = base[offset + i] + decoded[i] for i < decoded.size().
// out and base have the same size (out may alias base); offset + decoded.size() <= base.size().
void apply_decoded_update(std::span<const float> base, std::span<const float> decoded,
                          uint64_t offset, std::span<float> out);

// Values a codec message declares (its header's numel); DataLoss for a message too short to
// have a header. Nothing else is checked here: decode checks the whole message.
StatusOr<uint64_t> message_numel(std::span<const uint8_t> message);

// θ_{r+1} from θ_r (base) and round r's message covering θ[offset, offset + its numel): the
// message is fully checked (codec.h) before anything is applied, and a result that is not
// finite is DataLoss.
StatusOr<std::vector<float>> apply_update_message(std::span<const uint8_t> message,
                                                  std::span<const float> base, uint64_t offset);

}  // namespace atl::algorithms::compress
