// Bitwise through a crash: a coordinator SIGKILLed mid-round and restarted on the same store,
// or a node process SIGKILLed and started again, leads to the same θ in every round as a run
// that was never interrupted. The nodes redo the interrupted round from the state they saved
// at its start (node/round_snapshot.h; on disk for a node's own crash,
// node/round_state_file.h); without that, the redo starts from AdamW moments and error
// feedback that had already advanced (or fresh ones), and every later fingerprint differs.
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

// Each node writes the state its rounds start from to its own --state-dir, so that a node
// process killed and started again redoes the interrupted round bit for bit.
std::vector<std::string> state_dir_flag(Cluster& c, size_t i) {
  return {"--state-dir", c.dir / ("state-" + kNodes[i])};
}

void start_nodes(Cluster& c) {
  for (size_t i = 0; i < kNodes.size(); ++i)
    c.start_node(kNodes[i], kData[i], "", state_dir_flag(c, i));
}

// Node i SIGKILLed and started again at once with the same name, data and state directory.
void restart_node(Cluster& c, size_t i) {
  c.nodes[i].signal(SIGKILL);
  EXPECT_TRUE(c.nodes[i].wait_for(10s).has_value());
  c.start_node(kNodes[i], kData[i], "", state_dir_flag(c, i));
  if (::testing::Test::HasFatalFailure()) return;
  c.nodes[i] = std::move(c.nodes.back());
  c.nodes.pop_back();
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

// One kill: a pseudo-random 0–max_delay_ms after round `round` started, the coordinator
// (node < 0) or node `node` is SIGKILLed and started again at once on the same store and
// address (the same name, data and --state-dir).
struct Kill {
  int round;
  int node;
};

struct KilledRun {
  std::vector<std::string> fingerprints;  // every committed round's, from the store
  std::string node_logs;
  // Seconds from each coordinator restart to its log's first committed round.
  std::vector<double> restart_to_commit_s;
};

// The same experiment with the kills of `plan` (in round order). The nodes' logs go to
// *node_logs.
KilledRun with_kills(const std::string& toml, const std::vector<Kill>& plan,
                     int max_delay_ms = 60) {
  KilledRun out;
  Cluster c;
  c.make_ca(kNodes);
  c.start_coordinator(toml);
  start_nodes(c);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> delay_ms(0, max_delay_ms);
  std::string log_name = "coordinator.log";
  int restarts = 0;
  for (const Kill& kill : plan) {
    std::string text;
    EXPECT_TRUE(wait_for_log(c.dir / log_name,
                             std::regex("round_started " + std::to_string(kill.round) + ":"), 90s,
                             &text))
        << text;
    if (::testing::Test::HasFailure()) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    if (kill.node >= 0) {
      restart_node(c, static_cast<size_t>(kill.node));
      if (::testing::Test::HasFatalFailure()) return out;
      continue;
    }
    c.coordinator.signal(SIGKILL);
    EXPECT_TRUE(c.coordinator.wait_for(10s).has_value());
    log_name = "coordinator-" + std::to_string(++restarts) + ".log";
    const auto t0 = std::chrono::steady_clock::now();
    c.start_coordinator(toml, c.address, log_name);
    if (::testing::Test::HasFatalFailure()) return out;
    // A hang: a restarted coordinator that commits no round (or finishes) within 60 s.
    EXPECT_TRUE(wait_for_log(c.dir / log_name,
                             std::regex("round \\d+ committed|finished after"), 60s, &text))
        << "no round committed after restart " << restarts << ": " << text;
    out.restart_to_commit_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto code = c.coordinator.wait_for(180s);
  const std::string last = read_text(c.dir / log_name);
  EXPECT_TRUE(code.has_value()) << last;
  EXPECT_EQ(code.value_or(-1), 0) << last;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    auto nc = c.nodes[i].wait_for(30s);
    EXPECT_EQ(nc.value_or(-1), 0);
    out.node_logs += read_text(c.dir / (kNodes[i] + ".log"));
  }
  out.fingerprints = committed_fingerprints(c.dir / "store", "itest", kRounds);
  return out;
}

// The coordinator killed after rounds 2, 5, 8, ...
std::vector<Kill> coordinator_kills(int kills) {
  std::vector<Kill> plan;
  for (int k = 0; k < kills; ++k) plan.push_back({2 + 3 * k, -1});
  return plan;
}

// Every round of the killed run committed (none lost) with the uninterrupted run's θ, and the
// nodes' logs hold `redo_line` (the comparison covered a redo).
void expect_bitwise(const std::string& toml, const std::vector<Kill>& plan,
                    const std::string& redo_line) {
  const auto reference = uninterrupted(toml);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kRounds));
  const KilledRun killed = with_kills(toml, plan);
  ASSERT_EQ(killed.fingerprints.size(), static_cast<size_t>(kRounds)) << killed.node_logs;
  for (int r = 0; r < kRounds; ++r)
    EXPECT_EQ(killed.fingerprints[r], reference[r]) << "round " << r;
  EXPECT_NE(killed.node_logs.find(redo_line), std::string::npos) << killed.node_logs;
}

constexpr const char* kRedoneAfterCoordinatorCrash =
    "was not committed: redoing it from the state saved at its start";
constexpr const char* kResumedAfterNodeCrash = "before this process started";

TEST(CoordinatorCrashes, RoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise(crash_config(), coordinator_kills(3), kRedoneAfterCoordinatorCrash);
}

// Streaming DiLoCo (P = 2, τ = 2): a round starts before the previous one is known to be
// committed, so the redo also trains the overlapped steps and the merge again.
TEST(CoordinatorCrashes, StreamingRoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise(crash_config("streaming_fragments = 2\noverlap_steps = 2\nmerge_alpha = 0.5\n"),
                 coordinator_kills(2), kRedoneAfterCoordinatorCrash);
}

// A node process SIGKILLed mid-round (pulling θ, training, pushing) and started again: it
// reads the state the round started from back from its --state-dir, so every round equals the
// uninterrupted run's. Every node is killed once; min_nodes 3 makes each round wait for it.
TEST(NodeCrashes, RoundsInterruptedByNodeKillsAreRedoneBitwise) {
  expect_bitwise(crash_config(), {{2, 0}, {4, 1}, {7, 2}}, kResumedAfterNodeCrash);
}

TEST(NodeCrashes, StreamingRoundsInterruptedByNodeKillsAreRedoneBitwise) {
  expect_bitwise(crash_config("streaming_fragments = 2\noverlap_steps = 2\nmerge_alpha = 0.5\n"),
                 {{3, 1}, {6, 0}}, kResumedAfterNodeCrash);
}

}  // namespace
}  // namespace atl::testing
