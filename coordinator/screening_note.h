// What screening did in a committed round, as the tail of its log line: one " | update from ID
// ..." part per clipped or dropped update, naming the check that acted (docs/coordinator.md,
// "Screening and robust aggregation"); "" when every update was kept. The coordinator's and
// `atoll demo` / `atoll simulate`'s round lines end with it; the audit line of each update has
// its figures.
#pragma once

#include <string>

#include "coordinator/experiment_config.h"
#include "coordinator/store.h"

namespace atl::coordinator {

std::string screening_note(const RoundRecord& record);

// How an experiment protects its aggregate, as one line for the start of a run: screening (its
// limits, the absolute bound when set), the aggregator, differential privacy (clip, noise,
// delta, budget) and secure aggregation (threshold, masking), each only when it is on.
std::string protection_summary(const ExperimentConfig& config);

}  // namespace atl::coordinator
