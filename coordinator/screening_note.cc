#include "coordinator/screening_note.h"

#include <cstdio>

namespace atl::coordinator {

std::string screening_note(const RoundRecord& record) {
  std::string note;
  for (const ParticipantRecord& p : record.participants) {
    if (p.screen != "clipped" && p.screen != "dropped") continue;
    note += " | update from " + p.node_id + " ";
    if (p.screen_reason == "replay")
      note += "dropped: replay of its previous update";
    else if (p.screen_reason == "stale")
      note += "dropped: stale (closer to the previous round's updates than to this round's)";
    else if (p.screen_reason == "nonfinite")
      note += "dropped: the outer step with it is not finite";
    else {
      char figures[96];
      std::snprintf(figures, sizeof(figures), ": norm %.4g, limit %.4g (median %.4g)", p.norm,
                    record.norm_limit, record.median_norm);
      note += p.screen + figures;
    }
  }
  return note;
}

std::string protection_summary(const ExperimentConfig& config) {
  const RobustSection& r = config.robust;
  char text[512];
  std::string line;
  if (r.screen == "off") {
    line = "screening off";
  } else {
    // The limit is min(multiple x median, max_norm) when the absolute bound is set.
    char limit[128];
    if (r.max_norm > 0)
      std::snprintf(limit, sizeof(limit), "min(%g x the median norm, %g)", r.norm_multiple,
                    r.max_norm);
    else
      std::snprintf(limit, sizeof(limit), "%g x the median norm", r.norm_multiple);
    // 0 turns a check off (update_screening.h): "at cosine >= 0" read as "drop everything".
    char replay[64], stale[64];
    if (r.replay_cosine > 0)
      std::snprintf(replay, sizeof(replay), "replays at cosine >= %g", r.replay_cosine);
    else
      std::snprintf(replay, sizeof(replay), "replay detection off");
    if (r.stale_margin > 0)
      std::snprintf(stale, sizeof(stale), "stale updates at margin >= %g", r.stale_margin);
    else
      std::snprintf(stale, sizeof(stale), "stale detection off");
    std::snprintf(text, sizeof(text), "screening: %s above %s, %s, %s", r.screen.c_str(), limit,
                  replay, stale);
    line = text;
  }
  line += ", aggregator " + r.aggregator;
  const PrivacySection& p = config.privacy;
  if (p.clip_norm > 0) {
    std::snprintf(text, sizeof(text),
                  "; differential privacy: clip %g, noise multiplier %g, delta %g", p.clip_norm,
                  p.noise_multiplier, p.delta);
    line += text;
    if (p.target_epsilon > 0) {
      std::snprintf(text, sizeof(text), ", budget epsilon %g", p.target_epsilon);
      line += text;
    }
    // "seed": anyone who knows the seed can compute the noise (docs/configuration.md).
    line += p.noise_key == "seed"
                ? ", noise keyed by the seed (reproducible; NOT private against whoever knows "
                  "the seed)"
                : ", noise keyed by a secret in the store";
  }
  const SecAggSection& s = config.secagg;
  if (s.enabled) {
    std::snprintf(text, sizeof(text), "; secure aggregation: threshold %u sites%s", s.threshold,
                  s.masking ? "" : ", MASKING OFF (the coordinator sees each update)");
    line += text;
  }
  return line;
}

}  // namespace atl::coordinator
