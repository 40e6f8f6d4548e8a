// Human-readable figures for progress lines: durations, byte counts, rates.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/store.h"
#include "kernels/core/number_text.h"  // format_bytes

namespace atl::cli {

std::string format_duration(double seconds);  // "42s", "3m05s", "1h02m"
std::string format_count(double n);
// " node-a 3.142 node-b 3.201": each participant's mean inner loss of a committed round.
std::string format_participant_losses(const coordinator::RoundRecord& record);  // "12.3k", "4.56M"

}  // namespace atl::cli
