// A child process owned by RAII: started with posix_spawn, killed (SIGKILL) and reaped when the
// handle dies unless it was already waited for. Used by `atoll demo` to run node processes and by
// the integration tests to run real coordinators and nodes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/status.h"

namespace atl::node {

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(Subprocess&& o) noexcept;
  Subprocess& operator=(Subprocess&& o) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // argv[0] is the program path. stdout and stderr go to log_path (appended) when it is not
  // empty, else they are inherited.
  static StatusOr<Subprocess> spawn(const std::vector<std::string>& argv,
                                    const std::string& log_path = "");

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);
  // Waits up to timeout; returns the exit code (128+signal if killed) or nullopt on timeout.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

 private:
  void reap_or_kill();
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// The path of the running executable (/proc/self/exe), for re-executing subcommands.
std::string self_executable();

}  // namespace atl::node
