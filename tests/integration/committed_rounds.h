// What the `atoll demo` / `atoll simulate` comparisons read back: every committed round's θ
// fingerprint from a run's store, and the `final sha256` a command printed.
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "coordinator/store.h"

namespace atl::testing {

// The params_fingerprint of rounds 0 … rounds−1 of `experiment` in the store at store_dir
// ("" for a round that cannot be read, with a test failure).
inline std::vector<std::string> committed_fingerprints(const std::string& store_dir,
                                                       const std::string& experiment,
                                                       uint64_t rounds) {
  std::vector<std::string> out;
  auto store = coordinator::Store::open(store_dir);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return out;
  for (uint64_t r = 0; r < rounds; ++r) {
    auto rec = (*store)->load_round(experiment, r);
    EXPECT_TRUE(rec.ok()) << "round " << r << ": " << rec.status().to_string();
    out.push_back(rec.ok() ? rec->params_fingerprint : "");
  }
  return out;
}

// The 64 hex digits after "final sha256" in a command's output; "" when it printed none.
inline std::string printed_final_sha256(const std::string& output) {
  std::smatch m;
  static const std::regex re("final sha256 +([0-9a-f]{64})");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

// The check of every demo/simulate comparison: the two stores committed the same θ in each of
// `rounds` rounds, every round moved θ, and both commands printed the last one as their
// `final sha256`. Returns the demo's fingerprints, round by round.
inline std::vector<std::string> expect_same_committed_theta(const std::string& demo_store,
                                        const std::string& sim_store,
                                        const std::string& experiment, uint64_t rounds,
                                        const std::string& demo_output,
                                        const std::string& sim_output) {
  const auto demo_rounds = committed_fingerprints(demo_store, experiment, rounds);
  const auto sim_rounds = committed_fingerprints(sim_store, experiment, rounds);
  EXPECT_EQ(demo_rounds.size(), rounds);
  if (demo_rounds.size() != rounds || rounds == 0) return demo_rounds;
  EXPECT_EQ(sim_rounds, demo_rounds);
  // The rounds moved θ: not one fingerprint repeated.
  for (size_t r = 1; r < demo_rounds.size(); ++r) EXPECT_NE(demo_rounds[r], demo_rounds[r - 1]);
  EXPECT_EQ(demo_rounds.back().size(), 64u);
  EXPECT_EQ(printed_final_sha256(demo_output), demo_rounds.back()) << demo_output;
  EXPECT_EQ(printed_final_sha256(sim_output), demo_rounds.back()) << sim_output;
  return demo_rounds;
}

}  // namespace atl::testing
