// Error feedback for lossy codecs (kept on the node, across rounds): what a codec did not send is
// added to the next input, so the running sum of decoded values tracks the running sum of inputs
// (the difference is exactly the current residual, bounded by one round's compression error).
//   x = input + residual;  bytes = encode(x);  residual = x - decode(bytes)
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "algorithms/compress/codec.h"

namespace atl::algorithms::compress {

class ErrorFeedback {
 public:
  explicit ErrorFeedback(size_t numel) : residual_(numel, 0.0f) {}
  // A residual read back from a node's saved round state (node/round_state_file.h).
  explicit ErrorFeedback(std::vector<float> residual) : residual_(std::move(residual)) {}

  // input (numel) -> message bytes; updates the residual. On error the residual is unchanged.
  StatusOr<std::vector<uint8_t>> encode(const Codec& codec, std::span<const float> input);

  std::span<const float> residual() const { return residual_; }
  void reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

 private:
  std::vector<float> residual_;
};

}  // namespace atl::algorithms::compress
