#include "cli/signals.h"

#include <csignal>

namespace atl::cli {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

const std::atomic<bool>* install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  return &g_stop;
}

}  // namespace atl::cli
