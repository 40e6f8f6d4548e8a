// What `atoll demo` and `atoll coordinator` do with the dashboard once the experiment is over:
// keep serving it until Ctrl-C when stdout is a terminal (someone is watching), for N seconds
// with --serve-after-done-s N, and never with --exit-when-done or when stdout is a pipe or a file
// (scripts and CI must not hang).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "coordinator/http/server.h"

namespace atl::cli {

struct AfterDone {
  bool exit_when_done = false;
  int64_t serve_after_s = -1;  // -1: not given
};

// `specs` followed by --exit-when-done and --serve-after-done-s.
std::vector<FlagSpec> with_after_done_flags(std::vector<FlagSpec> specs);

// Reads the two flags (InvalidArgument naming the flag when the value is bad).
StatusOr<AfterDone> parse_after_done(const Flags& flags);

// Whether to keep serving; `stdout_is_terminal` is ::isatty(STDOUT_FILENO) in commands.
// `answers_nodes`: a coordinator's gRPC server, which tells a node that calls that the
// experiment is over; --serve-after-done-s keeps it up even without a dashboard.
bool keep_serving(const AfterDone& after, bool has_dashboard, bool stdout_is_terminal,
                  bool answers_nodes = false);

// Announces and keeps `http` serving (see keep_serving) until `stop` is set or the time is up.
// Returns at once when it should not keep serving. `say` (default: a blank line, then the line,
// on stdout) prints the announcement. `interrupt`, when given, is polled every 100 ms (on this
// thread); when it returns true serving ends early and so does this function, returning true
// (`atoll coordinator`: the dashboard started another experiment, which it goes on to follow).
bool serve_after_done(const coordinator::http::HttpServer* http, const AfterDone& after,
                      const std::atomic<bool>* stop,
                      const std::function<void(const std::string&)>& say = {},
                      const std::function<bool()>& interrupt = {}, bool answers_nodes = false);

}  // namespace atl::cli
