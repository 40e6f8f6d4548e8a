// SIGINT/SIGTERM → a stop flag that long-running commands poll (no work in the handler).
// A process that has not stopped kStopGraceSeconds after the signal (stuck in a call to a
// vanished peer, or in a library that does not return) prints one line and exits; a second
// signal exits at once (a SIGTERM repeated within about a second counts as the first one).
#pragma once

#include <atomic>

namespace atl::cli {

inline constexpr unsigned kStopGraceSeconds = 60;

// Installs the handlers once and returns the flag they set.
const std::atomic<bool>* install_stop_signals();

// The exit code of a command stopped by one of those signals: 128 + its number, as a shell
// reports a process the signal killed (130 after SIGINT, 143 after SIGTERM).
int stopped_exit_code();

}  // namespace atl::cli
