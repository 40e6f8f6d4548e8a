#include "node/held_theta.h"

namespace atl::node {

StatusOr<PulledParams> HeldTheta::pull(CoordinatorClient& link,
                                       const atoll_pb::v1::Task& task) const {
  HeldParams held{params_.vec(), fingerprint_, exact_};
  return link.pull_params(task.round(), task.params_fingerprint(),
                          fingerprint_.empty() ? nullptr : &held);
}

Status HeldTheta::adopt(PulledParams& pulled) {
  if (pulled.values.size() != params_.numel())
    return InvalidArgument("the coordinator's θ has " + std::to_string(pulled.values.size()) +
                           " values, this node's model has " + std::to_string(params_.numel()));
  params_.vec().swap(pulled.values);
  fingerprint_ = pulled.fingerprint;
  exact_ = pulled.exact;
  return Status::Ok();
}

}  // namespace atl::node
