// Bitwise through a crash: a coordinator SIGKILLed mid-round and restarted on the same store,
// or a node process SIGKILLed and started again, leads to the same θ in every round as a run
// that was never interrupted. The nodes redo the interrupted round from the state they saved
// at its start (node/round_snapshot.h; on disk for a node's own crash,
// node/round_state_file.h); without that, the redo starts from AdamW moments and error
// feedback that had already advanced (or fresh ones), and every later fingerprint differs.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
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
std::string crash_config(const std::string& extra_diloco = "", int rounds = kRounds,
                         int inner_steps = 20) {
  std::string toml = config_toml(rounds, 3, 60, 42, 3, inner_steps, 0.3) + extra_diloco;
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
std::vector<std::string> uninterrupted(const std::string& toml, int rounds) {
  Cluster c;
  c.make_ca(kNodes);
  c.start_coordinator(toml);
  start_nodes(c);
  std::string log;
  c.run_to_completion(120s, &log);
  if (::testing::Test::HasFatalFailure()) return {};
  return committed_fingerprints(c.dir / "store", "itest", rounds);
}

// One kill: a pseudo-random 0–max_delay_ms after round `round` started, the coordinator
// (node < 0) or node `node` is SIGKILLed and started again at once on the same store and
// address (the same name, data and --state-dir). kNextRound: the round after the one whose
// commit showed that the previous kill was recovered from (the first kill: round 1), so that
// kills keep pace with a run whose rounds are shorter than the time a kill takes to land.
// at_first_update: at once when the coordinator has accepted the first update of that round
// instead (a kill between a node's push and the commit: that node must redo the round).
constexpr int kNextRound = -1;
struct Kill {
  int round;
  int node;
  bool at_first_update = false;
};

struct KilledRun {
  std::vector<std::string> fingerprints;  // every committed round's, from the store
  std::string node_logs;
  // Committed rounds a restarted coordinator did not resume from (its first round below one a
  // previous coordinator logged as committed), and restarts after which no round committed
  // within 60 s.
  int rounds_lost = 0;
  int hangs = 0;
  std::string hang_logs;  // for each hang: the coordinator's log and the nodes' since the kill
};

// The highest round `log` says was committed: its "round N committed" lines, and a start line
// "round N, sha256" (rounds 0 … N − 1 committed); −1 for none.
int last_committed(const std::string& log) {
  int top = -1;
  static const std::regex committed("round (\\d+) committed");
  static const std::regex started(
      "coordinator: experiment \\S+ on \\S+ \\([^)]*\\), round (\\d+),");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), committed);
       it != std::sregex_iterator(); ++it)
    top = std::max(top, std::stoi((*it)[1].str()));
  for (auto it = std::sregex_iterator(log.begin(), log.end(), started);
       it != std::sregex_iterator(); ++it)
    top = std::max(top, std::stoi((*it)[1].str()) - 1);
  return top;
}

// Waits up to 90 s for `log` to show a round_started line of round `round` or later and, with
// `first_update`, an update_accepted line after it (that round's first accepted update; polled
// every 5 ms so that the kill lands before the other nodes push).
bool wait_for_round(const std::filesystem::path& log, int round, bool first_update,
                    std::string* text) {
  static const std::regex started("round_started (\\d+):");
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline) {
    *text = read_text(log);
    for (auto it = std::sregex_iterator(text->begin(), text->end(), started);
         it != std::sregex_iterator(); ++it)
      if (std::stoi((*it)[1].str()) >= round &&
          (!first_update || text->find("update_accepted", static_cast<size_t>(it->position())) !=
                                std::string::npos))
        return true;
    std::this_thread::sleep_for(first_update ? 5ms : 20ms);
  }
  return false;
}

// How many rounds `log` says were committed, and whether the experiment finished.
size_t commits_in(const std::string& log) {
  static const std::regex committed("round \\d+ committed|finished after");
  return static_cast<size_t>(std::distance(std::sregex_iterator(log.begin(), log.end(), committed),
                                           std::sregex_iterator()));
}

// Waits up to 60 s for the coordinator's log to hold more than `before` commits; false: a hang.
bool next_commit(Cluster& c, const std::string& log_name, size_t before) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (commits_in(read_text(c.dir / log_name)) > before) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

void note_hang(Cluster& c, const std::string& log_name, const char* what, int round,
               KilledRun& out) {
  ++out.hangs;
  out.hang_logs += std::string("no round committed within 60 s of the ") + what + " at round " +
                   std::to_string(round) + "\n== " + log_name + "\n" +
                   read_text(c.dir / log_name);
  for (const auto& n : kNodes) out.hang_logs += "== " + n + "\n" + read_text(c.dir / (n + ".log"));
}

// The same experiment of `rounds` rounds with the kills of `plan` (in round order).
KilledRun with_kills(const std::string& toml, const std::vector<Kill>& plan, int rounds,
                     int max_delay_ms = 60) {
  KilledRun out;
  Cluster c;
  c.make_ca(kNodes);
  c.start_coordinator(toml, c.restartable_listen());
  start_nodes(c);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> delay_ms(0, max_delay_ms);
  std::string log_name = "coordinator.log";
  int restarts = 0;
  int recovered_at = 0;  // the last round committed when the previous kill was recovered from
  for (const Kill& kill : plan) {
    // Round kill.round or a later one has started: an earlier kill that landed late may have
    // let the run pass kill.round already (a restarted coordinator's log starts at its round).
    const int round = kill.round == kNextRound ? recovered_at + 1 : kill.round;
    std::string text;
    EXPECT_TRUE(wait_for_round(c.dir / log_name, round, kill.at_first_update, &text)) << text;
    if (::testing::Test::HasFailure()) return out;
    // A kill after the experiment finished would test nothing (and find no commit after it).
    EXPECT_EQ(text.find("finished after"), std::string::npos)
        << "the run finished before the kill planned at round " << round
        << ": the plan needs more rounds\n"
        << text;
    if (::testing::Test::HasFailure()) return out;
    std::printf("kill of %s after round %d %s\n",
                kill.node < 0 ? "the coordinator" : kNodes[kill.node].c_str(), round,
                kill.at_first_update ? "had its first update" : "started");
    if (!kill.at_first_update)
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    if (kill.node >= 0) {
      const size_t before = commits_in(read_text(c.dir / log_name));
      restart_node(c, static_cast<size_t>(kill.node));
      if (::testing::Test::HasFatalFailure()) return out;
      if (!next_commit(c, log_name, before)) note_hang(c, log_name, "node kill", round, out);
      recovered_at = last_committed(read_text(c.dir / log_name));
      continue;
    }
    c.coordinator.signal(SIGKILL);
    EXPECT_TRUE(c.coordinator.wait_for(10s).has_value());
    const int committed_before = last_committed(read_text(c.dir / log_name));
    log_name = "coordinator-" + std::to_string(++restarts) + ".log";
    c.start_coordinator(toml, c.address, log_name);
    if (::testing::Test::HasFatalFailure()) return out;
    // Its start line names the round it resumes at: every round committed before is kept.
    out.rounds_lost += std::max(0, committed_before - last_committed(read_text(c.dir / log_name)));
    if (!next_commit(c, log_name, 0)) note_hang(c, log_name, "coordinator kill", round, out);
    recovered_at = last_committed(read_text(c.dir / log_name));
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
  out.fingerprints = committed_fingerprints(c.dir / "store", "itest", rounds);
  return out;
}

// The coordinator killed after rounds 2, 5, 8, ...
// The second kill lands at the round's first accepted update, so that at least that node has a
// round to redo (a kill at a random moment can land between rounds, or after every push, on a
// loaded machine three times in a row).
std::vector<Kill> coordinator_kills(int kills) {
  std::vector<Kill> plan;
  for (int k = 0; k < kills; ++k) plan.push_back({2 + 3 * k, -1, k == 1});
  return plan;
}

// Every round of the killed run committed (none lost, no hang) with the uninterrupted run's θ,
// and the nodes' logs hold `redo_line` (the comparison covered a redo).
void expect_bitwise(const std::string& toml, const std::vector<Kill>& plan,
                    const std::string& redo_line, int rounds = kRounds) {
  const auto reference = uninterrupted(toml, rounds);
  ASSERT_EQ(reference.size(), static_cast<size_t>(rounds));
  const KilledRun killed = with_kills(toml, plan, rounds);
  ASSERT_EQ(killed.fingerprints.size(), static_cast<size_t>(rounds)) << killed.node_logs;
  for (int r = 0; r < rounds; ++r) EXPECT_EQ(killed.fingerprints[r], reference[r]) << "round " << r;
  EXPECT_EQ(killed.rounds_lost, 0);
  EXPECT_EQ(killed.hangs, 0) << killed.hang_logs;
  size_t redone = 0;
  for (size_t at = killed.node_logs.find(redo_line); at != std::string::npos;
       at = killed.node_logs.find(redo_line, at + 1))
    ++redone;
  std::printf("%zu kills: %zu rounds redone by a node\n", plan.size(), redone);
  EXPECT_GT(redone, 0u) << killed.node_logs;
}

constexpr const char* kRedoneAfterCoordinatorCrash =
    "was not committed: redoing it from the state saved at its start";
constexpr const char* kResumedAfterNodeCrash = "before this process started";

// Rounds for the three coordinator kills (after rounds 2, 5 and 8): a round takes ~40 ms here,
// and the last kill, 0-60 ms after round 8 was seen to start, once landed after round 9 had
// finished the 10-round experiment (the restart then refused a finished experiment). Five
// rounds after the last planned kill leave it room on a busy machine.
constexpr int kCoordinatorKillRounds = 13;

TEST(CoordinatorCrashes, RoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise(crash_config("", kCoordinatorKillRounds), coordinator_kills(3),
                 kRedoneAfterCoordinatorCrash, kCoordinatorKillRounds);
}

// Streaming DiLoCo (P = 2, τ = 2): a round starts before the previous one is known to be
// committed, so the redo also trains the overlapped steps and the merge again.
TEST(CoordinatorCrashes, StreamingRoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise(crash_config("streaming_fragments = 2\noverlap_steps = 2\nmerge_alpha = 0.5\n"),
                 coordinator_kills(2), kRedoneAfterCoordinatorCrash);
}

// Compressed broadcast (int8 outer updates with the coordinator's error feedback): the error
// feedback and the update messages are committed with each round, so a coordinator killed and
// restarted on its store goes on with the same bits, and the nodes keep applying updates.
// Three kills, as in the tests above: one kill may land between a node's pushes and leave it
// nothing to redo.
TEST(CoordinatorCrashes, CompressedBroadcastRoundsInterruptedByKillsAreRedoneBitwise) {
  expect_bitwise(crash_config("pull_codec = \"int8\"\n", kCoordinatorKillRounds),
                 coordinator_kills(3), kRedoneAfterCoordinatorCrash, kCoordinatorKillRounds);
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

// The short version of bench/soak (make test): 10 kills in one run of 30 rounds, the
// coordinator and a node in turn, each landing 0–60 ms after the round that follows the
// previous kill's recovery started: no round lost, no hang (a round commits within 60 s of
// every restart), every θ the uninterrupted run's. A round of this model takes ~40 ms, so a
// kill can land a round or two after the one it waited for (log polling, the random delay, a
// busy machine); placed after each recovery, 10 kills take 10–20 rounds, and the run fails
// with one line if it finished before the last one. (Placed at fixed rounds, late kills added
// up until one landed after the experiment had finished.)
TEST(KillLoops, TenCoordinatorAndNodeKillsLoseNoRoundAndKeepEveryFingerprint) {
  constexpr int kLoopRounds = 30;
  const std::vector<Kill> plan = {
      {kNextRound, -1}, {kNextRound, 0}, {kNextRound, -1}, {kNextRound, 1}, {kNextRound, -1},
      {kNextRound, 2},  {kNextRound, -1}, {kNextRound, 0}, {kNextRound, -1}, {kNextRound, 1}};
  expect_bitwise(crash_config("", kLoopRounds, 10), plan, kResumedAfterNodeCrash, kLoopRounds);
}

}  // namespace
}  // namespace atl::testing

namespace atl::testing {
namespace {

// A coordinator started on a finished store without a dashboard exited at once, whatever
// --serve-after-done-s said, and a node that came back to it retried "connection refused" until
// --give-up-after and exited 1. With --serve-after-done-s it answers nodes for that long, and a
// node that calls is told the experiment is over and exits 0.
TEST(CoordinatorRestart, AFinishedStoreAnswersNodesForServeAfterDone) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(1, 1, 30), c.restartable_listen(), "coordinator.log",
                      {"--http", "off"});
  c.start_node("node-1", "brown:a");
  std::string log;
  c.run_to_completion(120s, &log);
  if (::testing::Test::HasFatalFailure()) return;
  c.nodes.clear();

  c.start_coordinator(config_toml(1, 1, 30), c.restartable_listen(), "again.log",
                      {"--http", "off", "--serve-after-done-s", "30"});
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "again.log",
                           std::regex("coordinator: still answering nodes for 30 s \\(Ctrl-C to "
                                      "exit\\); a node that calls is told the experiment is over"),
                           30s, &text))
      << text;
  c.start_node("node-1", "brown:a");
  auto node_code = c.nodes.back().wait_for(60s);
  const std::string node_log = read_text(c.dir / "node-1.log");
  ASSERT_TRUE(node_code.has_value()) << node_log;
  EXPECT_EQ(*node_code, 0) << node_log;
  EXPECT_NE(node_log.find("experiment finished after 1 rounds"), std::string::npos) << node_log;
  ::kill(c.coordinator.pid(), SIGTERM);
  auto code = c.coordinator.wait_for(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << read_text(c.dir / "again.log");
}

}  // namespace
}  // namespace atl::testing
