// The --devices flag of a node: which GPUs of this machine train together as one DiLoCo worker.
//   --devices cuda:0,cuda:1   two GPUs, gradients all-reduced every inner step (nccl_group.h)
//   --devices cuda:0          one GPU
// Plain C++ (no CUDA calls): parsing is testable anywhere; validation against the machine's
// device count is a separate step.
#pragma once

#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace atl::kernels::cuda {

// "cuda:0,cuda:1" -> {0, 1}. Rejects an empty list, entries other than cuda:<n> (n a decimal
// number < 1024, no sign, no spaces) and repeated devices, with one line saying how to fix it.
// The order is kept: rank r of the worker's NCCL group is the r-th device listed.
StatusOr<std::vector<int>> parse_devices(std::string_view spec);

// Every id must be < available (the machine's device count).
Status validate_devices(const std::vector<int>& ids, int available);

}  // namespace atl::kernels::cuda
