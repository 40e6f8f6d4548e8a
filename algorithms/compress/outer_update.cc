#include "algorithms/compress/outer_update.h"

#include <cmath>
#include <string>

#include "algorithms/compress/wire.h"

namespace atl::algorithms::compress {
namespace {

Status check_finite_range(std::span<const float> v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return DataLoss(std::string(what) + " is not finite at element " + std::to_string(i));
  return Status::Ok();
}

}  // namespace

void apply_decoded_update(std::span<const float> base, std::span<const float> decoded,
                          uint64_t offset, std::span<float> out) {
  if (out.data() != base.data()) std::copy(base.begin(), base.end(), out.begin());
  float* dst = out.data() + offset;
  const float* src = base.data() + offset;
  // One fp32 addition per element, nothing fused or reordered: coordinator and nodes run this
  // same loop on the same inputs.
  for (size_t i = 0; i < decoded.size(); ++i) dst[i] = src[i] + decoded[i];
}

StatusOr<std::vector<uint8_t>> compress_outer_update(const Codec& codec,
                                                     std::span<const float> theta,
                                                     std::span<float> candidate,
                                                     std::span<float> residual,
                                                     UpdateRange range) {
  const uint64_t n = theta.size();
  if (candidate.size() != n || residual.size() != n)
    return InvalidArgument("compress_outer_update: θ has " + std::to_string(n) +
                           " values, the candidate " + std::to_string(candidate.size()) +
                           " and the error feedback " + std::to_string(residual.size()));
  if (range.offset > n || range.numel > n - range.offset)
    return InvalidArgument("compress_outer_update: range [" + std::to_string(range.offset) +
                           ", +" + std::to_string(range.numel) + ") is outside θ of " +
                           std::to_string(n) + " values");
  // v = (θ_candidate − θ_r) + e_r over the range (the order matters for the bits).
  std::vector<float> v(range.numel);
  for (uint64_t i = 0; i < range.numel; ++i) {
    const uint64_t k = range.offset + i;
    v[i] = (candidate[k] - theta[k]) + residual[k];
  }
  ATOLL_ASSIGN_OR_RETURN(std::vector<uint8_t> message, codec.encode(v));
  // What the nodes will decode: the message itself, through the same decoder.
  std::vector<float> decoded(range.numel);
  ATOLL_RETURN_IF_ERROR(decode_into(message, decoded, codec.threads()));
  apply_decoded_update(theta, decoded, range.offset, candidate);
  ATOLL_RETURN_IF_ERROR(check_finite_range(
      candidate.subspan(range.offset, range.numel), "θ after the compressed outer update"));
  for (uint64_t i = 0; i < range.numel; ++i) residual[range.offset + i] = v[i] - decoded[i];
  return message;
}

StatusOr<uint64_t> message_numel(std::span<const uint8_t> message) {
  if (message.size() < kHeaderBytes)
    return DataLoss("codec message of " + std::to_string(message.size()) +
                    " bytes is shorter than its " + std::to_string(kHeaderBytes) + "-byte header");
  return load<uint64_t>(message.data() + 8);
}

StatusOr<std::vector<float>> apply_update_message(std::span<const uint8_t> message,
                                                  std::span<const float> base, uint64_t offset) {
  ATOLL_ASSIGN_OR_RETURN(const uint64_t numel, message_numel(message));
  if (offset > base.size() || numel > base.size() - offset)
    return DataLoss("an update of " + std::to_string(numel) + " values at offset " +
                    std::to_string(offset) + " does not fit θ of " + std::to_string(base.size()) +
                    " values");
  std::vector<float> decoded(numel);
  ATOLL_RETURN_IF_ERROR(decode_into(message, decoded));
  std::vector<float> out(base.size());
  apply_decoded_update(base, decoded, offset, out);
  ATOLL_RETURN_IF_ERROR(check_finite_range(std::span<const float>(out).subspan(offset, numel),
                                           "θ after the update"));
  return out;
}

}  // namespace atl::algorithms::compress
