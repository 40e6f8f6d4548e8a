// The global θ a site worker holds: the version it last pulled, which names it in the next pull
// so that the coordinator may answer with a delta against it (docs/protocol.md).
#pragma once

#include <string>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/coordinator_client.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

class HeldTheta {
 public:
  explicit HeldTheta(const algorithms::ParamLayout& layout) : params_(layout) {}

  // θ as last pulled: exact unless a lossy (bf16) delta was applied; zeros before the first.
  const algorithms::ParamSet& params() const { return params_; }
  // The version held ("" before the first pull).
  const std::string& fingerprint() const { return fingerprint_; }
  bool holds(const std::string& fingerprint) const { return fingerprint_ == fingerprint; }

  // θ of `task`'s round, as a delta against what is held when the coordinator finds that
  // smaller than the full θ. Reads this object only: another thread may pull while the owner
  // trains, as long as nothing adopts meanwhile.
  StatusOr<PulledParams> pull(CoordinatorClient& link, const atoll_pb::v1::Task& task) const;

  // Takes the pulled values (swapped with the previous ones). InvalidArgument when they are
  // another model's size (not retryable).
  Status adopt(PulledParams& pulled);

 private:
  algorithms::ParamSet params_;
  std::string fingerprint_;
  bool exact_ = true;  // PulledParams::exact of the pull
};

}  // namespace atl::node
