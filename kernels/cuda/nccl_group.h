// One DiLoCo worker on several GPUs of one node: an NCCL communicator clique over the devices of
// --devices (single process, one Context per GPU, rank r = r-th listed device). Every inner step
// each GPU computes gradients on its share of the batch into a flat fp32 buffer laid out the same
// way on every GPU (the model's fixed parameter order), and all_reduce_mean() leaves their mean
// on every GPU; the optimizer step then runs identically everywhere, so the replicas stay equal.
//
// NCCL's sum order is fixed for a given communicator (ring/tree over the same devices), so a
// run is reproducible for the same device list and topology; it is not bitwise equal to a
// single-GPU run (different summation order), which docs/cuda.md records.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda {

class NcclGroup {
 public:
  // Creates a Context per device and the communicators (ncclCommInitAll). Fails with a clear
  // message when NCCL is not built in, a device is missing, or fewer than 1 device is given.
  static StatusOr<std::unique_ptr<NcclGroup>> create(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(contexts_.size()); }
  Context& context(int rank) { return *contexts_[size_t(rank)]; }

  // In place on every rank: bufs[r] (n floats on device r) = mean over ranks of bufs[·].
  // Enqueued on each rank's Context stream (one NCCL group call); does not synchronize.
  Status all_reduce_mean(const std::vector<float*>& bufs, size_t n);
  // Sum instead of mean (for callers that scale themselves).
  Status all_reduce_sum(const std::vector<float*>& bufs, size_t n);
  Status synchronize();

 private:
  NcclGroup() = default;
  Status all_reduce(const std::vector<float*>& bufs, size_t n, bool mean);
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<void*> comms_;  // ncclComm_t, owned (destroyed in ~NcclGroup)
};

// Whether this build has NCCL.
bool nccl_available();

// The one call a node makes for `--devices <spec>`: parse_devices, then the machine's device
// count (Unavailable "no CUDA device: ..." without a GPU), validate_devices, NcclGroup::create.
StatusOr<std::unique_ptr<NcclGroup>> open_worker_devices(std::string_view spec);

}  // namespace atl::kernels::cuda
