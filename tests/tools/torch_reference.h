// What the tests that compare Atoll with the PyTorch reference (tests/tools/torch_llama.py, run
// with Debian's python3-torch) share: the error measure, the interpreter check and the command.
#pragma once

#include <stdlib.h>  // mkdtemp
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"

namespace atl::testing {

// Relative error of a tensor a against the reference b: max_i |a_i - b_i| / max(max_i |b_i|, tiny),
// the largest absolute error scaled by the tensor's largest magnitude (an elementwise ratio would
// blow up on entries that are ~0 in both).
template <typename A, typename B>
double rel_err(const A* a, const B* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// x with 17 significant digits, so the Python side reads back the same double.
inline std::string exact_decimal(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// The safetensors metadata torch_llama.py reads for a comparison: the model (dense fields; MoE
// and LoRA keys are added by the test that needs them), the trainer and the step count.
inline std::map<std::string, std::string> torch_reference_metadata(
    const algorithms::ModelConfig& c, const algorithms::TrainerConfig& tc, int steps) {
  return {{"vocab", std::to_string(c.vocab)},
          {"dim", std::to_string(c.dim)},
          {"layers", std::to_string(c.layers)},
          {"heads", std::to_string(c.heads)},
          {"kv_heads", std::to_string(algorithms::num_kv_heads(c))},
          {"attention_bias", c.attention_bias ? "1" : "0"},
          {"tie_word_embeddings", c.tie_word_embeddings ? "1" : "0"},
          {"ffn_hidden", std::to_string(c.ffn_hidden)},
          {"rope_base", exact_decimal(c.rope_base)},
          {"norm_eps", exact_decimal(c.norm_eps)},
          {"lr", exact_decimal(tc.lr)},
          {"beta1", exact_decimal(tc.beta1)},
          {"beta2", exact_decimal(tc.beta2)},
          {"eps", exact_decimal(tc.eps)},
          {"weight_decay", exact_decimal(tc.weight_decay)},
          {"grad_clip", exact_decimal(tc.grad_clip)},
          {"steps", std::to_string(steps)}};
}

// A private temp dir for the files exchanged with the reference, removed at scope exit
// (path is empty when it could not be created).
struct ReferenceTempDir {
  std::filesystem::path path;
  ReferenceTempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "atoll-torch-XXXXXX").string();
    if (mkdtemp(tmpl.data())) path = tmpl;
  }
  ~ReferenceTempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  ReferenceTempDir(const ReferenceTempDir&) = delete;
  ReferenceTempDir& operator=(const ReferenceTempDir&) = delete;
};

// s in single quotes for /bin/sh (the paths the tests pass hold no single quote).
// (Appended piecewise: GCC 12 warns falsely on "'" + s + "'" here, -Wrestrict.)
inline std::string shell_quote(const std::string& s) {
  std::string quoted;
  quoted.reserve(s.size() + 2);
  quoted.append(1, '\'').append(s).append(1, '\'');
  return quoted;
}

// "" when ATOLL_PYTHON has the torch package, else one line saying what to install. The check
// finds the package without importing it (0.1 s instead of the 2-5 s of `import torch`, paid
// again by the reference script); a torch that is found but fails to import fails the script,
// and with it the test, with Python's own message.
inline std::string torch_unavailable_reason() {
  const std::string python = ATOLL_PYTHON;
  if (std::filesystem::exists(python) &&
      std::system((shell_quote(python) +
                   " -c 'import importlib.util, sys; "
                   "sys.exit(importlib.util.find_spec(\"torch\") is None)' >/dev/null 2>&1")
                      .c_str()) == 0)
    return "";
  return python +
         " with PyTorch is required for this test (Debian package python3-torch); run "
         "deploy/install-deps.sh (make test runs it)";
}

// The shell command that runs torch_llama.py with `args` (each quoted).
inline std::string torch_llama_command(const std::vector<std::string>& args) {
  std::string cmd = shell_quote(ATOLL_PYTHON);
  cmd.append(" ").append(
      shell_quote(std::string(ATOLL_SOURCE_DIR) + "/tests/tools/torch_llama.py"));
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  return cmd;
}

// Runs the Python reference `script` (a path under the source tree) with `args` as
// `python3 SCRIPT ARGS...` would, with this process's stdout, stderr and working directory, and
// returns its exit code (-1 if it died without one). Through the torch server
// (tests/tools/torch_server.py, started by CTest: torch imported once, forked per run) when
// ATOLL_TORCH_SERVER names its socket and it answers, else in a fresh interpreter.
inline int run_python_reference(const std::string& script, const std::vector<std::string>& args) {
  if (const char* path = std::getenv("ATOLL_TORCH_SERVER");
      path != nullptr && std::strlen(path) < sizeof(sockaddr_un{}.sun_path)) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::string msg = std::filesystem::current_path().string();
      msg.append(1, '\0').append(script);
      for (const auto& a : args) msg.append(1, '\0').append(a);
      iovec iov{msg.data(), msg.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(2 * sizeof(int));
      const int out_fds[2] = {STDOUT_FILENO, STDERR_FILENO};
      std::memcpy(CMSG_DATA(c), out_fds, sizeof out_fds);
      if (::sendmsg(fd, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size())) {
        char answer[16] = {};
        const ssize_t n = ::recv(fd, answer, sizeof answer - 1, 0);
        ::close(fd);
        return n > 0 ? std::atoi(answer) : -1;
      }
    }
    if (fd >= 0) ::close(fd);
  }
  std::string cmd = shell_quote(ATOLL_PYTHON) + " " + shell_quote(script);
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// run_python_reference of tests/tools/torch_llama.py.
inline int run_torch_llama(const std::vector<std::string>& args) {
  return run_python_reference(std::string(ATOLL_SOURCE_DIR) + "/tests/tools/torch_llama.py",
                              args);
}

}  // namespace atl::testing
