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

}  // namespace atl::coordinator
