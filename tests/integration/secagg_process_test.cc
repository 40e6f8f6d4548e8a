// Secure aggregation across real processes: `atoll coordinator` and three `atoll node`s over
// mTLS on loopback with [secagg] on finish every round, and commit the same θ fingerprints as
// the same experiment whose sites send their quantized updates unmasked.
#include <string>
#include <vector>

#include "tests/integration/cli_test_util.h"
#include "tests/integration/process_cluster.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

std::string secagg_toml(bool masking) {
  return config_toml(3, 3, 60) +
         "[robust]\nscreen = \"off\"\n[secagg]\nenabled = true\nclip_range = 0.5\n"
         "threshold = 2\nmasking = " +
         (masking ? "true" : "false") + "\n";
}

TEST(SecAggProcesses, ThreeNodesFinishWithMaskedSumsEqualToTheClearOnes) {
  std::vector<std::vector<Committed>> runs;
  for (bool masking : {true, false}) {
    Cluster c;
    c.make_ca({"node-1", "node-2", "node-3"});
    c.start_coordinator(secagg_toml(masking));
    c.start_node("node-1", "brown:a");
    c.start_node("node-2", "brown:b");
    c.start_node("node-3", "brown:f");
    std::string log;
    c.run_to_completion(120s, &log);
    if (::testing::Test::HasFatalFailure()) return;
    auto rounds = committed_rounds(log);
    ASSERT_EQ(rounds.size(), 3u) << log;
    EXPECT_LT(rounds.back().loss, rounds.front().loss) << log;
    EXPECT_NE(log.find("TLS 1.3, mTLS"), std::string::npos) << log;
    runs.push_back(rounds);
  }
  for (size_t r = 0; r < runs[0].size(); ++r)
    EXPECT_EQ(runs[0][r].sha, runs[1][r].sha) << "round " << r;
}

}  // namespace
}  // namespace atl::testing
