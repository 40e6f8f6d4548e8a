#include "cli/serve_after_done.h"

#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

namespace atl::cli {

std::vector<FlagSpec> with_after_done_flags(std::vector<FlagSpec> specs) {
  specs.push_back(
      {"exit-when-done", false, "exit when the experiment ends even on a terminal", ""});
  specs.push_back({"serve-after-done-s", true,
                   "keep serving the dashboard (a coordinator: also its nodes) this many seconds "
                   "after the experiment ends",
                   ""});
  return specs;
}

StatusOr<AfterDone> parse_after_done(const Flags& flags) {
  AfterDone out;
  out.exit_when_done = flags.has("exit-when-done");
  ATOLL_ASSIGN_OR_RETURN(out.serve_after_s,
                         flags.get_int("serve-after-done-s", -1, 0, 7 * 24 * 3600));
  return out;
}

bool keep_serving(const AfterDone& after, bool has_dashboard, bool stdout_is_terminal,
                  bool answers_nodes) {
  if (after.exit_when_done) return false;
  if (!has_dashboard) return answers_nodes && after.serve_after_s >= 0;
  return after.serve_after_s >= 0 || stdout_is_terminal;
}

bool serve_after_done(const coordinator::http::HttpServer* http, const AfterDone& after,
                      const std::atomic<bool>* stop,
                      const std::function<void(const std::string&)>& say,
                      const std::function<bool()>& interrupt, bool answers_nodes) {
  if (!keep_serving(after, http != nullptr, ::isatty(STDOUT_FILENO) == 1, answers_nodes))
    return false;
  using Clock = std::chrono::steady_clock;
  const bool bounded = after.serve_after_s >= 0;
  const std::string how_long =
      (bounded ? " for " + std::to_string(after.serve_after_s) + " s" : std::string()) +
      " (Ctrl-C to exit)";
  const std::string line =
      http ? "dashboard: still serving " + http->url() + how_long
           : "coordinator: still answering nodes" + how_long +
                 "; a node that calls is told the experiment is over";
  if (say) {
    say(line);
  } else {
    std::printf("\n%s\n", line.c_str());
    std::fflush(stdout);
  }
  const auto until = Clock::now() + std::chrono::seconds(bounded ? after.serve_after_s : 0);
  while (!stop->load() && (!bounded || Clock::now() < until)) {
    if (interrupt && interrupt()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace atl::cli
