// coordinator/screening_note.h: the tail of a round's log line names each clipped or dropped
// update and the check that acted.
#include "coordinator/screening_note.h"

#include <gtest/gtest.h>

namespace atl::coordinator {
namespace {

ParticipantRecord participant(const std::string& id, const std::string& screen,
                              const std::string& reason, double norm) {
  ParticipantRecord p;
  p.node_id = id;
  p.pushed = true;
  p.screen = screen;
  p.screen_reason = reason;
  p.norm = norm;
  return p;
}

TEST(ScreeningNote, EachClippedOrDroppedUpdateWithTheCheckThatActed) {
  RoundRecord r;
  r.median_norm = 0.25;
  r.norm_limit = 1.25;
  EXPECT_EQ(screening_note(r), "");
  r.participants = {participant("node-1", "kept", "", 0.2),
                    participant("node-2", "dropped", "stale", 0.241),
                    participant("node-3", "dropped", "norm", 3e6),
                    participant("node-4", "clipped", "norm", 2.5),
                    participant("node-5", "dropped", "replay", 0.3),
                    participant("node-6", "dropped", "nonfinite", 1e30)};
  EXPECT_EQ(screening_note(r),
            " | update from node-2 dropped: stale (closer to the previous round's updates than to "
            "this round's)"
            " | update from node-3 dropped: norm 3e+06, limit 1.25 (median 0.25)"
            " | update from node-4 clipped: norm 2.5, limit 1.25 (median 0.25)"
            " | update from node-5 dropped: replay of its previous update"
            " | update from node-6 dropped: the outer step with it is not finite");
}

// The start-of-run line: the absolute bound was not shown (a max_norm of 1e-30 dropped every
// update with no word of it), and secure aggregation was not mentioned anywhere.
TEST(ProtectionSummary, NamesEveryProtectionThatIsOn) {
  ExperimentConfig c;
  EXPECT_EQ(protection_summary(c),
            "screening: drop above 5 x the median norm, replays at cosine >= 0.99, stale updates "
            "at margin >= 0.05, aggregator mean");
  c.robust.screen = "clip";
  c.robust.max_norm = 0.001;
  EXPECT_EQ(protection_summary(c),
            "screening: clip above min(5 x the median norm, 0.001), replays at cosine >= 0.99, "
            "stale updates at margin >= 0.05, aggregator mean");
  // 0 turns the replay and stale checks off; "at cosine >= 0" read as "drop everything".
  ExperimentConfig unchecked = c;
  unchecked.robust.replay_cosine = 0;
  unchecked.robust.stale_margin = 0;
  EXPECT_EQ(protection_summary(unchecked),
            "screening: clip above min(5 x the median norm, 0.001), replay detection off, stale "
            "detection off, aggregator mean");
  c.robust.screen = "off";
  c.privacy.clip_norm = 1;
  c.privacy.noise_multiplier = 1.1;
  c.privacy.target_epsilon = 8;
  EXPECT_EQ(protection_summary(c),
            "screening off, aggregator mean; differential privacy: clip 1, noise multiplier 1.1, "
            "delta 1e-05, budget epsilon 8, noise keyed by a secret in the store");
  c.privacy.noise_key = "seed";
  EXPECT_NE(protection_summary(c).find(
                ", noise keyed by the seed (reproducible; NOT private against whoever knows the "
                "seed)"),
            std::string::npos)
      << protection_summary(c);
  c.privacy = PrivacySection{};
  c.secagg.enabled = true;
  c.secagg.threshold = 3;
  EXPECT_EQ(protection_summary(c),
            "screening off, aggregator mean; secure aggregation: threshold 3 sites");
  c.secagg.masking = false;
  EXPECT_NE(protection_summary(c).find("MASKING OFF"), std::string::npos);
}

}  // namespace
}  // namespace atl::coordinator
