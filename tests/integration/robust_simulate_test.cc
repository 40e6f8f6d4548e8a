// `atoll simulate --byzantine K --attack NAME`: Byzantine sites against the round engine's
// screening and aggregation (bench/robust at test size). A tiny 4-site run with one attacker:
// the default [robust] section ends within 2% of the honest run, the plain mean without
// screening does not survive the ×10⁶ update. Bad flags are one line each.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

// Four sites, a small model, 3 rounds of 4 steps: a few seconds.
std::vector<std::string> tiny_run(const std::string& run_dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {"simulate", "--nodes",  "4",    "--rounds",       "3",
                                   "--inner-steps", "4",   "--dim", "32",    "--layers", "2",
                                   "--heads",  "2",        "--ffn", "64",    "--seq",    "32",
                                   "--batch",  "2",        "--lr",  "1e-2",  "--eval-tokens",
                                   "1024",     "--http",   "off",   "--store", run_dir,
                                   "--summary-json", run_dir + ".json", "--seed", "5", "--split", "iid"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct Summary {
  int exit_code = -1;
  std::string output;
  double final_bpb = NAN;
  uint64_t clipped = 0, dropped = 0, replayed = 0;
  std::string fingerprint;
};

Summary simulate(const TempDir& dir, const std::string& name, std::vector<std::string> extra) {
  const std::string run_dir = dir / name;
  auto r = run_atoll(tiny_run(run_dir, std::move(extra)), dir / (name + ".log"),
                     std::chrono::seconds(120));
  Summary s;
  s.exit_code = r.exit_code;
  s.output = r.output;
  if (r.exit_code != 0) return s;
  const boost::json::object o = boost::json::parse(read_text(run_dir + ".json")).as_object();
  if (o.at("final_val_bpb").is_number()) s.final_bpb = o.at("final_val_bpb").to_number<double>();
  s.clipped = o.at("updates_clipped").to_number<uint64_t>();
  s.dropped = o.at("updates_dropped").to_number<uint64_t>();
  s.replayed = o.at("updates_replayed").to_number<uint64_t>();
  s.fingerprint = std::string(o.at("final_fingerprint").as_string());
  return s;
}

TEST(RobustSimulate, DefaultSettingHoldsAgainstOneAttackerAndThePlainMeanDoesNot) {
  TempDir dir;
  const Summary honest = simulate(dir, "honest", {});
  ASSERT_EQ(honest.exit_code, 0) << honest.output;
  ASSERT_TRUE(std::isfinite(honest.final_bpb));
  EXPECT_EQ(honest.clipped + honest.dropped, 0u);  // screening never touches these honest updates

  for (const std::string attack : {"scale", "sign-flip"}) {
    const Summary attacked =
        simulate(dir, "default-" + attack, {"--byzantine", "1", "--attack", attack});
    ASSERT_EQ(attacked.exit_code, 0) << attacked.output;
    ASSERT_TRUE(std::isfinite(attacked.final_bpb)) << attack;
    EXPECT_LE(std::abs(attacked.final_bpb - honest.final_bpb), 0.02 * honest.final_bpb)
        << attack << ": " << attacked.final_bpb << " against honest " << honest.final_bpb;
    EXPECT_EQ(attacked.dropped, 3u) << attack;  // the attacker's update, in each of 3 rounds
  }

  // Without screening the ×10⁶ update wrecks θ: the sites' inner loss stops being finite (the
  // run ends with that line), or the run ends ≥ 10% worse.
  const Summary plain =
      simulate(dir, "plain-scale", {"--screen", "off", "--byzantine", "1", "--attack", "scale"});
  if (plain.exit_code == 0)
    EXPECT_GE(plain.final_bpb, 1.10 * honest.final_bpb) << plain.output;
  else
    EXPECT_NE(plain.output.find("inner training diverged"), std::string::npos) << plain.output;
}

// A site that replays its first update byte for byte: the default screening drops the replay in
// every round after the first, and the run ends within 2% of the honest one. With replay
// detection off (--replay-cosine 0) the same run keeps every replay.
TEST(RobustSimulate, ReplayIsDroppedEveryRoundAfterTheFirst) {
  TempDir dir;
  const Summary honest = simulate(dir, "honest", {});
  ASSERT_EQ(honest.exit_code, 0) << honest.output;
  const Summary replay = simulate(dir, "replay", {"--byzantine", "1", "--attack", "replay"});
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  EXPECT_EQ(replay.dropped, 2u);  // rounds 1 and 2 of 0..2
  EXPECT_EQ(replay.clipped, 0u);
  EXPECT_EQ(replay.replayed, 2u);  // both as replays
  // The round lines say so (coordinator/screening_note.h), and the honest run's say nothing.
  const std::string note = "| update from node-4 dropped: replay of its previous update";
  size_t notes = 0;
  for (size_t at = replay.output.find(note); at != std::string::npos;
       at = replay.output.find(note, at + 1))
    ++notes;
  EXPECT_EQ(notes, 2u) << replay.output;
  EXPECT_EQ(honest.output.find("| update from"), std::string::npos) << honest.output;
  ASSERT_TRUE(std::isfinite(replay.final_bpb));
  EXPECT_LE(std::abs(replay.final_bpb - honest.final_bpb), 0.02 * honest.final_bpb)
      << replay.final_bpb << " against honest " << honest.final_bpb;

  const Summary kept = simulate(dir, "replay-kept",
                                {"--replay-cosine", "0", "--byzantine", "1", "--attack", "replay"});
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_EQ(kept.dropped, 0u);
  EXPECT_EQ(kept.replayed, 0u);
  EXPECT_NE(kept.fingerprint, replay.fingerprint);
}

TEST(RobustSimulate, TheTokenClaimIsRefusedSoTheRunIsTheHonestOne) {
  TempDir dir;
  const Summary honest = simulate(dir, "honest", {"--screen", "off"});
  const Summary liar =
      simulate(dir, "tokens", {"--screen", "off", "--byzantine", "1", "--attack", "tokens"});
  ASSERT_EQ(honest.exit_code, 0) << honest.output;
  ASSERT_EQ(liar.exit_code, 0) << liar.output;
  ASSERT_FALSE(honest.fingerprint.empty());
  // The inflated claim is refused in each of the 3 rounds, and the update counted with its
  // honest weight: the same θ.
  size_t refusals = 0;
  for (size_t at = 0; (at = liar.output.find("update_rejected node-4: INVALID_ARGUMENT: tokens = "
                                             "9223372036854775807 is more than a round allows",
                                             at)) != std::string::npos;
       ++at)
    ++refusals;
  EXPECT_EQ(refusals, 3u) << liar.output;
  EXPECT_EQ(liar.fingerprint, honest.fingerprint);
}

TEST(RobustSimulate, BadFlagsAreOneLine) {
  TempDir dir;
  struct Case {
    std::vector<std::string> extra;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--byzantine", "1"}, "--byzantine 1 needs --attack NAME, one of sign-flip, gaussian"},
      {{"--attack", "scale"}, "--attack scale needs --byzantine K > 0"},
      {{"--byzantine", "1", "--attack", "flip"}, "--attack flip is not an attack: use one of"},
      {{"--byzantine", "5", "--attack", "scale"}, "--byzantine"},
      {{"--byzantine", "-1", "--attack", "scale"}, "--byzantine"},
      {{"--screen", "maybe"}, "--screen must be clip, drop or off, not maybe"},
      {{"--aggregator", "avg"}, "--aggregator must be mean, clipped-mean, trimmed-mean"},
      {{"--norm-multiple", "0.5"}, "--norm-multiple"},
      {{"--replay-cosine", "1.5"}, "--replay-cosine"},
      {{"--dp-clip", "1", "--screen", "drop"}, "cannot be combined with --dp-clip"},
      // Flags DP makes meaningless were taken and ignored (exit 0), or refused naming config keys.
      {{"--dp-delta", "0.5"},
       "--dp-delta needs --dp-clip C > 0: differential privacy is off without it"},
      {{"--dp-noise", "1"},
       "--dp-noise needs --dp-clip C > 0: differential privacy is off without it"},
      {{"--dp-clip", "1", "--norm-multiple", "3"},
       "--norm-multiple cannot be combined with --dp-clip: differential privacy turns robust "
       "screening off; drop one of them"},
      {{"--dp-clip", "1", "--replay-cosine", "0.5"}, "--replay-cosine cannot be combined with"},
      {{"--dp-clip", "1", "--aggregator", "median"},
       "--aggregator median cannot be combined with --dp-clip: the noise is calibrated to an "
       "unweighted mean of clipped updates; drop one of them"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto r = run_atoll(tiny_run(dir / ("bad" + std::to_string(i)), c.extra),
                       dir / ("bad" + std::to_string(i) + ".log"), std::chrono::seconds(60));
    ++i;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(r.output.rfind("atoll simulate: ", 0), 0u) << r.output;
  }
  // Byzantine sites are in-process only: `atoll demo` does not know the flags.
  auto demo = run_atoll({"demo", "--byzantine", "1", "--attack", "scale"}, dir / "demo.log",
                        std::chrono::seconds(60));
  EXPECT_EQ(demo.exit_code, 2) << demo.output;
  EXPECT_NE(demo.output.find("--byzantine"), std::string::npos) << demo.output;
  EXPECT_EQ(std::count(demo.output.begin(), demo.output.end(), '\n'), 1) << demo.output;
}

}  // namespace
}  // namespace atl::testing
