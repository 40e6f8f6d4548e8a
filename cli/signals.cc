#include "cli/signals.h"

#include <csignal>

namespace atl::cli {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{SIGINT};

extern "C" void on_stop_signal(int signal_number) {
  g_stop_signal.store(signal_number);
  g_stop.store(true);
}

}  // namespace

const std::atomic<bool>* install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  return &g_stop;
}

int stopped_exit_code() {
  return 128 + g_stop_signal.load();
}

}  // namespace atl::cli
