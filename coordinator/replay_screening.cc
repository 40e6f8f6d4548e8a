// Replay detection in the commit's screening (update_screening.h): each update's count sketch
// against its node's last accepted one, and the screening memory committed with each round.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "algorithms/diloco/replay.h"
#include "coordinator/update_screening.h"
#include "kernels/core/sha256.h"

namespace atl::coordinator {

namespace {

constexpr char kReplayMagic[4] = {'A', 'T', 'R', '1'};
constexpr char kScreeningMagic[4] = {'A', 'T', 'R', '2'};
constexpr char kStaleHistoryMagic[4] = {'A', 'T', 'R', '3'};

template <typename T>
void put_le(std::string& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the coordinator's hosts are little-endian (as the blobs)
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

// Reads little-endian values from `bytes`; `ok` turns false on the first read past the end.
struct ByteReader {
  std::string_view bytes;
  size_t pos = 0;
  bool ok = true;
  template <typename T>
  T get() {
    T v{};
    if (bytes.size() - pos < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view take(size_t n) {
    if (bytes.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string_view s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
};

std::string cosine_text(double c) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", c);
  return buf;
}

}  // namespace

uint64_t update_layout_key(const PendingUpdate& update, algorithms::compress::UpdateRange range) {
  Sha256 h;
  const uint64_t head[3] = {update.delta.size(), range.offset, range.numel};
  h.update(head, sizeof(head));
  h.update(update.indices.data(), update.indices.size() * sizeof(uint32_t));
  const Sha256Digest d = h.finish();
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = (key << 8) | d[i];
  return key;
}

ReplayMemory screen_replays(PendingUpdates& updates, const ReplayMemory& previous,
                            double min_cosine, algorithms::compress::UpdateRange range,
                            ScreenOutcome& screened) {
  ReplayMemory sketched;
  if (!(min_cosine > 0)) return sketched;
  // Each update's cosine to its node's previous accepted one (nodes with one of the same layout).
  std::map<std::string, double> cosines;
  for (const auto& [id, u] : updates) {
    ReplayEntry entry{update_layout_key(u, range), algorithms::replay_sketch(u.delta, u.indices)};
    auto prev = previous.find(id);
    if (prev != previous.end() && prev->second.layout == entry.layout) {
      // A bit-for-bit equal sketch is cosine 1 exactly (replay_cosine = 1: exact repeats only).
      const bool zero = algorithms::sketch_cosine(entry.sketch, entry.sketch) == 0.0;
      cosines[id] = !zero && entry.sketch == prev->second.sketch
                        ? 1.0
                        : algorithms::sketch_cosine(entry.sketch, prev->second.sketch);
    }
    sketched[id] = std::move(entry);
  }
  for (auto it = updates.begin(); it != updates.end();) {
    auto c = cosines.find(it->first);
    if (c == cosines.end() || c->second < min_cosine) {
      ++it;
      continue;
    }
    // Where the round's other sites are as close to their own previous updates (a tiny model,
    // or one inner step: updates of nearly fixed direction), closeness is no sign of a replay:
    // one is also kReplayCloserThanTheRound times closer than their median, measured as 1 − cos.
    // An exact repeat (1 − cos = 0) always is.
    std::vector<double> others;
    for (const auto& [id, cosine] : cosines)
      if (id != it->first) others.push_back(1.0 - cosine);
    // Alone in its round (one site, or the only one with a previous update of this layout):
    // nothing to judge closeness against, so only an exact repeat is dropped (a single honest
    // site's updates were dropped in 10 of 2,300 rounds).
    if (others.empty() && c->second < 1.0) {
      ++it;
      continue;
    }
    if (!others.empty()) {
      std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
      const double typical = others[others.size() / 2];
      if (1.0 - c->second > typical / kReplayCloserThanTheRound) {
        ++it;
        continue;
      }
    }
    const PendingUpdate& u = it->second;
    ScreenedUpdate& s = screened.by_node[it->first];
    s.norm = algorithms::l2_norm(u.delta);
    s.action = algorithms::ScreenAction::kDropped;
    s.reason = "replay";
    s.why = "dropped: replay: cosine " + cosine_text(c->second) +
            " to its previous accepted update >= robust.replay_cosine " + cosine_text(min_cosine);
    sketched.erase(it->first);
    it = updates.erase(it);
  }
  return sketched;
}

ReplayMemory sketch_updates(const PendingUpdates& updates,
                            algorithms::compress::UpdateRange range) {
  ReplayMemory sketched;
  for (const auto& [id, u] : updates)
    sketched[id] =
        ReplayEntry{update_layout_key(u, range), algorithms::replay_sketch(u.delta, u.indices)};
  return sketched;
}

ReplayMemory remember_accepted(const ReplayMemory& previous, ReplayMemory sketched,
                               const PendingUpdates& applied) {
  ReplayMemory next = previous;
  for (auto& [id, entry] : sketched)
    if (applied.count(id)) next[id] = std::move(entry);
  return next;
}

std::string encode_replay_memory(const ReplayMemory& memory) {
  std::string out(kReplayMagic, sizeof(kReplayMagic));
  put_le<uint64_t>(out, memory.size());
  for (const auto& [id, e] : memory) {
    put_le<uint32_t>(out, static_cast<uint32_t>(id.size()));
    out += id;
    put_le<uint64_t>(out, e.layout);
    put_le<uint64_t>(out, e.sketch.size());
    for (double v : e.sketch) put_le<double>(out, v);
  }
  return out;
}

StatusOr<ReplayMemory> decode_replay_memory(std::string_view bytes, const std::string& what) {
  auto corrupt = [&](const std::string& why) {
    return DataLoss("store: " + what + " is corrupt (" + why + ")");
  };
  ByteReader r{bytes};
  if (r.take(sizeof(kReplayMagic)) != std::string_view(kReplayMagic, sizeof(kReplayMagic)))
    return corrupt("no ATR1 header");
  const uint64_t entries = r.get<uint64_t>();
  ReplayMemory memory;
  for (uint64_t i = 0; r.ok && i < entries; ++i) {
    const uint32_t id_bytes = r.get<uint32_t>();
    const std::string id(r.take(id_bytes));
    ReplayEntry e;
    e.layout = r.get<uint64_t>();
    const uint64_t values = r.get<uint64_t>();
    if (!r.ok || values != algorithms::kReplaySketchBuckets)
      return corrupt("a sketch of " + std::to_string(values) + " values, expected " +
                     std::to_string(algorithms::kReplaySketchBuckets));
    e.sketch.resize(values);
    for (double& v : e.sketch) v = r.get<double>();
    if (r.ok) memory[id] = std::move(e);
  }
  if (!r.ok) return corrupt("truncated");
  if (r.pos != bytes.size()) return corrupt("trailing bytes");
  return memory;
}

std::string encode_screening_memory(const ScreeningMemory& memory) {
  std::string out;
  if (!memory.stale_history.empty()) {
    out.assign(kStaleHistoryMagic, sizeof(kStaleHistoryMagic));
    put_le<uint64_t>(out, memory.stale_history.size());
    for (const auto& round : memory.stale_history) {
      put_le<uint64_t>(out, round.size());
      for (const SiteFigure& f : round) {
        put_le<uint32_t>(out, static_cast<uint32_t>(f.node_id.size()));
        out += f.node_id;
        put_le<double>(out, f.figure);
      }
    }
  }
  if (memory.applied_last_round.empty()) return out + encode_replay_memory(memory.replay);
  out.append(kScreeningMagic, sizeof(kScreeningMagic));
  put_le<uint64_t>(out, memory.applied_last_round.size());
  for (const std::string& id : memory.applied_last_round) {
    put_le<uint32_t>(out, static_cast<uint32_t>(id.size()));
    out += id;
  }
  return out + encode_replay_memory(memory.replay);
}

StatusOr<ScreeningMemory> decode_screening_memory(std::string_view bytes, const std::string& what) {
  ScreeningMemory memory;
  ByteReader r{bytes};
  if (r.take(sizeof(kStaleHistoryMagic)) ==
      std::string_view(kStaleHistoryMagic, sizeof(kStaleHistoryMagic))) {
    const uint64_t rounds = r.get<uint64_t>();
    if (r.ok && rounds > kStaleHistoryRounds)
      return DataLoss("store: " + what + " is corrupt (a stale history of " +
                      std::to_string(rounds) + " rounds, at most " +
                      std::to_string(kStaleHistoryRounds) + " are kept)");
    for (uint64_t i = 0; r.ok && i < rounds; ++i) {
      const uint64_t figures = r.get<uint64_t>();
      // Each figure takes at least 12 bytes: a count beyond what is left is corrupt, not an
      // allocation.
      if (!r.ok || figures > (bytes.size() - r.pos) / (sizeof(uint32_t) + sizeof(double))) {
        r.ok = false;
        break;
      }
      std::vector<SiteFigure> round(figures);
      for (SiteFigure& f : round) {
        const uint32_t id_bytes = r.get<uint32_t>();
        f.node_id = std::string(r.take(id_bytes));
        f.figure = r.get<double>();
        if (r.ok && !std::isfinite(f.figure))
          return DataLoss("store: " + what + " is corrupt (a stale figure is not finite)");
      }
      memory.stale_history.push_back(std::move(round));
    }
    if (!r.ok) return DataLoss("store: " + what + " is corrupt (truncated)");
    bytes = bytes.substr(r.pos);
  }
  r = ByteReader{bytes};
  if (r.take(sizeof(kScreeningMagic)) ==
      std::string_view(kScreeningMagic, sizeof(kScreeningMagic))) {
    const uint64_t ids = r.get<uint64_t>();
    for (uint64_t i = 0; r.ok && i < ids; ++i) {
      const uint32_t id_bytes = r.get<uint32_t>();
      const std::string_view id = r.take(id_bytes);
      if (r.ok) memory.applied_last_round.emplace(id);
    }
    if (!r.ok) return DataLoss("store: " + what + " is corrupt (truncated)");
  } else {
    r.pos = 0;  // "ATR1": the replay memory alone
  }
  ATOLL_ASSIGN_OR_RETURN(memory.replay, decode_replay_memory(bytes.substr(r.pos), what));
  return memory;
}

}  // namespace atl::coordinator
