#include "node/round_snapshot.h"

#include <algorithm>

namespace atl::node {

StatusOr<RoundSnapshot> take_round_snapshot(uint64_t round, const InnerStep& inner,
                                            const SyncStrategy& sync,
                                            const algorithms::ParamSet* local,
                                            uint32_t overlap_steps) {
  RoundSnapshot s;
  s.round = round;
  ATOLL_ASSIGN_OR_RETURN(s.inner, inner.save_state());
  s.sync = sync.save_state();
  if (local != nullptr) s.local = *local;
  s.overlap_steps = overlap_steps;
  return s;
}

Status restore_round_snapshot(const RoundSnapshot& snapshot, InnerStep& inner, SyncStrategy& sync,
                              algorithms::ParamSet& local) {
  ATOLL_RETURN_IF_ERROR(inner.restore_state(*snapshot.inner));
  ATOLL_RETURN_IF_ERROR(sync.restore_state(*snapshot.sync));
  if (snapshot.local) {
    if (snapshot.local->numel() != local.numel())
      return Internal("round snapshot: θ_local has " + std::to_string(snapshot.local->numel()) +
                      " values, the site's " + std::to_string(local.numel()));
    std::copy(snapshot.local->data(), snapshot.local->data() + local.numel(), local.data());
  }
  return Status::Ok();
}

}  // namespace atl::node
