#include "cli/progress.h"

#include <cmath>
#include <cstdio>

namespace atl::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  char buf[32];
  long s = std::lround(seconds);
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), seconds < 10 ? "%.1fs" : "%.0fs", seconds);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string format_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

std::string format_participant_losses(const coordinator::RoundRecord& record) {
  std::string losses;
  for (const auto& part : record.participants) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.3f", part.node_id.c_str(), part.loss);
    losses += buf;
  }
  return losses;
}

}  // namespace atl::cli
