#include "algorithms/compress/error_feedback.h"

#include <string>

namespace atl::algorithms::compress {

StatusOr<std::vector<uint8_t>> ErrorFeedback::encode(const Codec& codec,
                                                     std::span<const float> input) {
  if (input.size() != residual_.size()) {
    return InvalidArgument("error feedback holds " + std::to_string(residual_.size()) +
                           " values, input has " + std::to_string(input.size()));
  }
  std::vector<float> x(input.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = input[i] + residual_[i];
  auto bytes = codec.encode(x);
  if (!bytes.ok()) return bytes.status();
  std::vector<float> sent(x.size());
  ATOLL_RETURN_IF_ERROR(codec.decode_into(*bytes, sent));
  for (size_t i = 0; i < x.size(); ++i) residual_[i] = x[i] - sent[i];
  return bytes;
}

}  // namespace atl::algorithms::compress
