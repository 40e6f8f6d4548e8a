// Bitwise through a crash: a coordinator SIGKILLed mid-round and restarted on the same store
// leads to the same θ in every round as a run that was never interrupted. The nodes redo the
// interrupted round from the state they saved at its start (node/round_snapshot.h); without
// that, the redo starts from AdamW moments and error feedback that had already advanced, and
// every later fingerprint differs.
#include <signal.h>

#include <random>
#include <regex>
#include <thread>

#include "tests/integration/cli_test_util.h"
#include "tests/integration/committed_rounds.h"
#include "tests/integration/process_cluster.h"

namespace atl::testing {
namespace {

constexpr int kRounds = 10;
const std::vector<std::string> kNodes = {"node-1", "node-2", "node-3"};
const std::vector<std::string> kData = {"brown:a", "brown:b", "brown:f"};

// Three nodes, every round needs all of them (min_nodes 3), 20 inner steps a round (long
// enough for a kill to land while the nodes train), int8 pushes with error feedback (node state
// a redo must put back besides AdamW's).
std::string crash_config(const std::string& extra_diloco = "") {
  std::string toml = config_toml(kRounds, 3, 60, 42, 3, 20, 0.3) + extra_diloco;
  toml.insert(toml.find("[diloco]"), "codec = \"int8\"\nerror_feedback = true\n");
  return toml;
}

void start_nodes(Cluster& c) {
  for (size_t i = 0; i < kNodes.size(); ++i) c.start_node(kNodes[i], kData[i]);
}

// Every committed round's fingerprint of a run that nothing interrupts.
std::vector<std::string> uninterrupted(const std::string& toml) {
  Cluster c;
  c.make_ca(kNodes);
  c.start_coordinator(toml);
  start_nodes(c);
  std::string log;
  c.run_to_completion(120s, &log);
  if (::testing::Test::HasFatalFailure()) return {};
  return committed_fingerprints(c.dir / "store", "itest", kRounds);
}

// The same experiment with the coordinator SIGKILLed `kills` times, each a pseudo-random
// 0–60 ms after round 2, 5, 8, ... started (the nodes are then pulling θ or training), and
// restarted at once on the same store and address. Returns every committed round's
// fingerprint; *node_logs gets the nodes' logs.
std::vector<std::string> with_kills(const std::string& toml, int kills, std::string* node_logs) {
  Cluster c;
  c.make_ca(kNodes);
  c.start_coordinator(toml);
  start_nodes(c);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> delay_ms(0, 60);
  std::string log_name = "coordinator.log";
  for (int k = 0; k < kills; ++k) {
    const int round = 2 + 3 * k;
    std::string text;
    EXPECT_TRUE(wait_for_log(
        c.dir / log_name, std::regex("round_started " + std::to_string(round) + ":"), 90s, &text))
        << text;
    if (::testing::Test::HasFailure()) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    c.coordinator.signal(SIGKILL);
    EXPECT_TRUE(c.coordinator.wait_for(10s).has_value());
    log_name = "coordinator-" + std::to_string(k + 1) + ".log";
    c.start_coordinator(toml, c.address, log_name);
    if (::testing::Test::HasFatalFailure()) return {};
  }
  auto code = c.coordinator.wait_for(180s);
  const std::string last = read_text(c.dir / log_name);
  EXPECT_TRUE(code.has_value()) << last;
  EXPECT_EQ(code.value_or(-1), 0) << last;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    auto nc = c.nodes[i].wait_for(30s);
    EXPECT_EQ(nc.value_or(-1), 0);
    *node_logs += read_text(c.dir / (kNodes[i] + ".log"));
  }
  return committed_fingerprints(c.dir / "store", "itest", kRounds);
}

void expect_bitwise_through_kills(const std::string& toml, int kills) {
  const auto reference = uninterrupted(toml);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kRounds));
  std::string node_logs;
  const auto crashed = with_kills(toml, kills, &node_logs);
  ASSERT_EQ(crashed.size(), static_cast<size_t>(kRounds)) << node_logs;
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(crashed[r], reference[r]) << "round " << r;
  // The kills interrupted rounds the nodes had begun, and the nodes redid them from the state
  // saved at their start (so the comparison above covered the redo).
  EXPECT_NE(node_logs.find("was not committed: redoing it from the state saved at its start"),
            std::string::npos)
      << node_logs;
}

TEST(CoordinatorCrashes, RoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise_through_kills(crash_config(), 3);
}

// Streaming DiLoCo (P = 2, τ = 2): a round starts before the previous one is known to be
// committed, so the redo also trains the overlapped steps and the merge again.
TEST(CoordinatorCrashes, StreamingRoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise_through_kills(
      crash_config("streaming_fragments = 2\noverlap_steps = 2\nmerge_alpha = 0.5\n"), 2);
}

}  // namespace
}  // namespace atl::testing
