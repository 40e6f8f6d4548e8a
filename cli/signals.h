// SIGINT/SIGTERM → a stop flag that long-running commands poll (no work in the handler).
#pragma once

#include <atomic>

namespace atl::cli {

// Installs the handlers once and returns the flag they set.
const std::atomic<bool>* install_stop_signals();

}  // namespace atl::cli
