// SIGINT/SIGTERM → a stop flag that long-running commands poll (no work in the handler).
#pragma once

#include <atomic>

namespace atl::cli {

// Installs the handlers once and returns the flag they set.
const std::atomic<bool>* install_stop_signals();

// The exit code of a command stopped by one of those signals: 128 + its number, as a shell
// reports a process the signal killed (130 after SIGINT, 143 after SIGTERM).
int stopped_exit_code();

}  // namespace atl::cli
