#include "cli/signals.h"

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

extern "C" void on_stop_signal(int signal_number) {
  if (g_stop.exchange(true)) {  // the second one: the user means now
    say("atoll: second stop signal; exiting now\n");
    ::_exit(128 + signal_number);
  }
  g_stop_signal.store(signal_number);
  ::alarm(kStopGraceSeconds);
}

}  // namespace

const std::atomic<bool>* install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
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
