// A node process started again under the same name: without its saved state it says it trains
// on from a fresh optimizer state (docs/coordinator.md, "Restart").
#include <signal.h>

#include <regex>
#include <string>

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
                        std::regex("round (\\d+): starting without a saved round state "
                                   "\\(--state-dir\\): training on from a fresh optimizer state"),
                        120s, &node_log);
  ASSERT_TRUE(m.has_value()) << node_log;
  EXPECT_GE(std::stoi((*m)[1].str()), 2) << node_log;
}

}  // namespace
}  // namespace atl::testing
