#include "cli/signals.h"

#include <time.h>
#include <unistd.h>

#include <csignal>

namespace atl::cli {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{SIGINT};

// Only async-signal-safe calls below (write, _exit, alarm).
void say(const char* line) {
  size_t n = 0;
  while (line[n] != '\0') ++n;
  (void)!::write(STDERR_FILENO, line, n);
}

static_assert(kStopGraceSeconds == 60, "on_stop_grace_passed's line says 60 s");

extern "C" void on_stop_grace_passed(int) {
  say("atoll: did not stop within 60 s of the signal (a call or a computation that cannot be "
      "interrupted); exiting now\n");
  ::_exit(128 + g_stop_signal.load());
}

// When the first stop signal came (CLOCK_MONOTONIC, seconds): a SIGTERM repeated within about a
// second is the same request delivered twice (coreutils `timeout` signals the child and then
// its process group), not an impatient user, who presses Ctrl-C (SIGINT) again.
std::atomic<int64_t> g_first_stop_s{0};

int64_t monotonic_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<int64_t>(t.tv_sec);
}

// The first stop signal's number, claimed by one handler alone (0: none yet). Two signals
// pending together may run their handlers at once on two threads: a plain flag let both take
// themselves for the first, and "now" became a graceful stop.
std::atomic<int> g_first_signal{0};

extern "C" void on_stop_signal(int signal_number) {
  int first = 0;
  if (!g_first_signal.compare_exchange_strong(first, signal_number)) {
    const int64_t first_s = g_first_stop_s.load();  // 0 while the first handler has not set it
    if (signal_number == SIGTERM && first == SIGTERM &&
        (first_s == 0 || monotonic_seconds() - first_s < 2))
      return;                                         // the same request again
    say("atoll: second stop signal; exiting now\n");  // the user means now
    ::_exit(128 + signal_number);
  }
  g_first_stop_s.store(monotonic_seconds());
  g_stop_signal.store(signal_number);
  g_stop.store(true);
  ::alarm(kStopGraceSeconds);
  // Ctrl-C at a terminal: the stop may wait for a step or a transfer, so say what happens (a
  // SIGTERM comes from a supervisor, whose process logs its own stop line).
  if (signal_number == SIGINT)
    say("atoll: stopping (the current step or transfer ends first); Ctrl-C again exits at once\n");
}

}  // namespace

const std::atomic<bool>* install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  // Both stop signals wait while either's handler runs: a SIGINT landing inside the SIGTERM
  // handler before it set the flag was taken for a first signal, and the two pending together
  // ended in a graceful stop instead of "now".
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction grace {};
  grace.sa_handler = on_stop_grace_passed;
  sigemptyset(&grace.sa_mask);
  sigaction(SIGALRM, &grace, nullptr);
  return &g_stop;
}

int stopped_exit_code() {
  return 128 + g_stop_signal.load();
}

}  // namespace atl::cli
