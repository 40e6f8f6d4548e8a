#include "node/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace atl::node {

Subprocess::~Subprocess() { reap_or_kill(); }

Subprocess::Subprocess(Subprocess&& o) noexcept : pid_(o.pid_), exit_code_(o.exit_code_) {
  o.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    reap_or_kill();
    pid_ = o.pid_;
    exit_code_ = o.exit_code_;
    o.pid_ = -1;
  }
  return *this;
}

void Subprocess::reap_or_kill() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

StatusOr<Subprocess> Subprocess::spawn(const std::vector<std::string>& argv,
                                       const std::string& log_path) {
  if (argv.empty()) return InvalidArgument("spawn: empty argv");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return IoError("cannot start " + argv[0] + ": " + std::strerror(rc));
  Subprocess p;
  p.pid_ = pid;
  return p;
}

bool Subprocess::running() {
  if (pid_ <= 0 || exit_code_) return false;
  return !wait_for(std::chrono::milliseconds(0)).has_value();
}

void Subprocess::signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

std::optional<int> Subprocess::wait_for(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  if (pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Polling with a short period: waitpid has no timeout, and a SIGCHLD handler would be global
  // state shared with the rest of the process.
  while (true) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "atoll";
  buf[n] = '\0';
  return buf;
}

}  // namespace atl::node
