// What screening did in a committed round, as the tail of its log line: one " | update from ID
// ..." part per clipped or dropped update, naming the check that acted (docs/coordinator.md,
// "Screening and robust aggregation"); "" when every update was kept. The coordinator's and
// `atoll demo` / `atoll simulate`'s round lines end with it; the audit line of each update has
// its figures.
#pragma once

#include <string>

#include "coordinator/store.h"

namespace atl::coordinator {

std::string screening_note(const RoundRecord& record);

}  // namespace atl::coordinator
