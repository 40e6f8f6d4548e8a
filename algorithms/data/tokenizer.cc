#include "algorithms/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <unordered_map>
#include <utility>

#include "kernels/core/sha256.h"

namespace atl::algorithms::data {

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// ---- pre-tokenization -------------------------------------------------------------------------

enum ByteClass : uint8_t { kLetter, kDigit, kSpace, kPunct };

constexpr std::array<ByteClass, 256> make_class_table() {
  std::array<ByteClass, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) {
      t[c] = kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = kDigit;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r') {
      t[c] = kSpace;
    } else {
      t[c] = kPunct;
    }
  }
  return t;
}
constexpr std::array<ByteClass, 256> kClass = make_class_table();

inline ByteClass byte_class(char c) {
  return kClass[static_cast<unsigned char>(c)];
}

// Length of the contraction suffix starting at s[i] == '\'' ('s 't 'm 'd 're 've 'll), or 0.
size_t contraction_length(std::string_view s, size_t i) {
  if (i + 1 >= s.size()) return 0;
  char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// Calls emit(chunk) for each chunk of `s`, in order (rules in tokenizer.h).
template <typename Emit>
void for_each_chunk(std::string_view s, Emit&& emit) {
  const size_t n = s.size();
  auto emit_range = [&](size_t b, size_t e) {
    while (e - b > kMaxChunkBytes) {
      emit(s.substr(b, kMaxChunkBytes));
      b += kMaxChunkBytes;
    }
    if (e > b) emit(s.substr(b, e - b));
  };
  // End of the run of bytes of class `k` starting at `i`.
  auto run_end = [&](size_t i, ByteClass k) {
    while (i < n && byte_class(s[i]) == k) ++i;
    return i;
  };
  size_t i = 0;
  while (i < n) {
    if (s[i] == '\'') {
      if (size_t len = contraction_length(s, i)) {
        emit_range(i, i + len);
        i += len;
        continue;
      }
    }
    ByteClass k = byte_class(s[i]);
    if (k != kSpace) {
      size_t e = run_end(i, k);
      emit_range(i, e);
      i = e;
      continue;
    }
    size_t j = run_end(i, kSpace);
    if (j == n) {  // trailing spaces: one chunk
      emit_range(i, j);
      break;
    }
    if (j - i >= 2) {  // keep the last space byte for the next chunk
      emit_range(i, j - 1);
      i = j - 1;
    }
    if (s[i] == ' ') {  // " word", " 123", " .,"
      size_t e = run_end(i + 1, byte_class(s[i + 1]));
      emit_range(i, e);
      i = e;
    } else {  // a lone '\n', '\t', ...
      emit_range(i, i + 1);
      i += 1;
    }
  }
}

inline uint64_t pack_pair(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Merges every non-overlapping occurrence of (a, b), left to right, into c. Returns the new
// length. Training and encoding both use this, so they cut words identically.
size_t merge_pair(int32_t* ids, size_t n, int32_t a, int32_t b, int32_t c) {
  size_t w = 0;
  for (size_t i = 0; i < n;) {
    if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
      ids[w++] = c;
      i += 2;
    } else {
      ids[w++] = ids[i++];
    }
  }
  return w;
}

// A merge list is valid when each merge refers only to ids defined before it (bytes and
// earlier merges) and no pair is merged twice.
Status validate_merges(const std::vector<BpeMerge>& merges) {
  if (merges.size() > static_cast<size_t>(BpeTokenizer::kMaxVocab - 256))
    return InvalidArgument("BPE: " + std::to_string(merges.size()) +
                           " merges exceed the limit of " +
                           std::to_string(BpeTokenizer::kMaxVocab - 256));
  std::unordered_map<uint64_t, size_t> seen;
  seen.reserve(merges.size() * 2);
  for (size_t i = 0; i < merges.size(); ++i) {
    const BpeMerge& m = merges[i];
    const int64_t next_id = 256 + static_cast<int64_t>(i);
    if (m.left < 0 || m.right < 0 || m.left >= next_id || m.right >= next_id)
      return InvalidArgument("BPE merge " + std::to_string(i) + " (" + std::to_string(m.left) +
                             " " + std::to_string(m.right) +
                             ") refers to an id not defined before it (ids so far: 0.." +
                             std::to_string(next_id - 1) + ")");
    auto [it, inserted] = seen.emplace(pack_pair(m.left, m.right), i);
    if (!inserted)
      return InvalidArgument("BPE merge " + std::to_string(i) + " (" + std::to_string(m.left) +
                             " " + std::to_string(m.right) + ") repeats merge " +
                             std::to_string(it->second));
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string_view> split_chunks(std::string_view text) {
  std::vector<std::string_view> out;
  for_each_chunk(text, [&](std::string_view c) { out.push_back(c); });
  return out;
}

// ---- Tokenizer / ByteTokenizer ----------------------------------------------------------------

std::vector<std::vector<int32_t>> Tokenizer::encode_many(
    std::span<const std::string_view> texts) const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(texts.size());
  for (std::string_view t : texts) out.push_back(encode(t));
  return out;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) {
      out.push_back(static_cast<char>(id));
    } else {
      out.append(kReplacementChar);
    }
  }
  return out;
}

// ---- PairRankMap ------------------------------------------------------------------------------

void PairRankMap::build(std::span<const BpeMerge> merges) {
  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  for (size_t i = 0; i < merges.size(); ++i) {
    uint64_t key = pack(merges[i].left, merges[i].right);
    size_t j = hash(key) & mask_;
    while (slots_[j].key != kEmpty) j = (j + 1) & mask_;
    slots_[j] = Slot{key, 256 + static_cast<int32_t>(i)};
  }
}

// ---- BpeTokenizer: construction, encode, decode ----------------------------------------------

StatusOr<BpeTokenizer> BpeTokenizer::from_merges(std::vector<BpeMerge> merges) {
  ATOLL_RETURN_IF_ERROR(validate_merges(merges));
  BpeTokenizer t;
  t.merges_ = std::move(merges);
  t.pieces_.reserve(256 + t.merges_.size());
  for (int c = 0; c < 256; ++c) t.pieces_.emplace_back(1, static_cast<char>(c));
  for (const BpeMerge& m : t.merges_) t.pieces_.push_back(t.pieces_[m.left] + t.pieces_[m.right]);
  t.ranks_.build(t.merges_);
  return t;
}

void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  // Chunks are at most kMaxChunkBytes long (split_chunks guarantees it), except when a caller
  // hands a longer one to this function directly: then work through it in slices.
  if (chunk.size() > kMaxChunkBytes) {
    for (size_t b = 0; b < chunk.size(); b += kMaxChunkBytes)
      encode_chunk(chunk.substr(b, kMaxChunkBytes), out);
    return;
  }
  std::array<int32_t, kMaxChunkBytes> ids;
  size_t n = chunk.size();
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<unsigned char>(chunk[i]);
  // Apply the earliest-learned merge present, everywhere in the chunk, until none applies: the
  // same sequence of merges training applied to this chunk.
  while (n >= 2) {
    int32_t best = INT32_MAX;
    for (size_t i = 0; i + 1 < n; ++i) {
      int32_t r = ranks_.find(ids[i], ids[i + 1]);
      if (r >= 0 && r < best) best = r;
    }
    if (best == INT32_MAX) break;
    const BpeMerge& m = merges_[best - 256];
    n = merge_pair(ids.data(), n, m.left, m.right, best);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + n);
}

namespace {

// Chunk -> its tokens, shared across the texts of one encode_many call. Keys view the caller's
// texts, which outlive the call.
class ChunkCache {
 public:
  void encode(const BpeTokenizer& tok, std::string_view text, std::vector<int32_t>& out) {
    for_each_chunk(text, [&](std::string_view chunk) {
      auto it = map_.find(chunk);
      if (it == map_.end()) {
        size_t begin = arena_.size();
        tok.encode_chunk(chunk, arena_);
        it = map_.emplace(chunk, std::make_pair(begin, arena_.size() - begin)).first;
      }
      const int32_t* p = arena_.data() + it->second.first;
      out.insert(out.end(), p, p + it->second.second);
    });
  }

 private:
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> map_;  // (offset, length)
  std::vector<int32_t> arena_;
};

}  // namespace

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  ChunkCache cache;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  cache.encode(*this, text, out);
  return out;
}

std::vector<std::vector<int32_t>> BpeTokenizer::encode_many(
    std::span<const std::string_view> texts) const {
  ChunkCache cache;
  std::vector<std::vector<int32_t>> out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    out[i].reserve(texts[i].size() / 3 + 16);
    cache.encode(*this, texts[i], out[i]);
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  const int32_t v = vocab_size();
  for (int32_t id : ids) {
    if (id >= 0 && id < v) {
      out.append(pieces_[id]);
    } else {
      out.append(kReplacementChar);
    }
  }
  return out;
}

// ---- BpeTokenizer: training -------------------------------------------------------------------

namespace {

struct HeapItem {
  int64_t count;
  uint64_t pair;  // (left << 32) | right
};
// std heap is a max-heap: "less" means lower priority = smaller count, or equal count and a
// larger pair (so the lowest (left, right) wins ties).
struct HeapLess {
  bool operator()(const HeapItem& x, const HeapItem& y) const {
    return x.count != y.count ? x.count < y.count : x.pair > y.pair;
  }
};

}  // namespace

StatusOr<BpeTokenizer> BpeTokenizer::train(std::span<const std::string_view> texts,
                                           int32_t vocab_size) {
  if (vocab_size < 256 || vocab_size > kMaxVocab)
    return InvalidArgument("BPE vocab_size must be in [256, " + std::to_string(kMaxVocab) +
                           "], got " + std::to_string(vocab_size));
  const size_t target_merges = static_cast<size_t>(vocab_size - 256);

  // Words: unique chunks with their counts, in byte order (a deterministic numbering).
  std::unordered_map<std::string_view, int64_t> chunk_counts;
  for (std::string_view text : texts)
    for_each_chunk(text, [&](std::string_view c) { ++chunk_counts[c]; });
  std::vector<std::pair<std::string_view, int64_t>> unique(chunk_counts.begin(),
                                                           chunk_counts.end());
  chunk_counts.clear();
  std::sort(unique.begin(), unique.end());
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [chunk, count] : unique) {
    if (chunk.size() < 2) continue;  // no pair to merge
    std::vector<int32_t> ids(chunk.size());
    for (size_t i = 0; i < chunk.size(); ++i) ids[i] = static_cast<unsigned char>(chunk[i]);
    words.push_back(std::move(ids));
    freq.push_back(count);
  }

  // Pair counts (weighted by word frequency) and, per pair, the words that may contain it
  // (a superset: entries go stale when a word's pair is merged away, and are re-checked).
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& ids = words[w];
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      uint64_t key = pack_pair(ids[i], ids[i + 1]);
      counts[key] += freq[w];
      auto& list = where[key];
      if (list.empty() || list.back() != static_cast<int32_t>(w))
        list.push_back(static_cast<int32_t>(w));
    }
  }
  // Lazy max-heap: an entry is valid when its count equals the pair's current count; every
  // increase pushes a fresh entry, and a stale entry popped is re-pushed at the current count.
  std::vector<HeapItem> heap;
  heap.reserve(counts.size());
  for (const auto& [key, count] : counts) heap.push_back({count, key});
  std::make_heap(heap.begin(), heap.end(), HeapLess{});
  auto push = [&](HeapItem item) {
    heap.push_back(item);
    std::push_heap(heap.begin(), heap.end(), HeapLess{});
  };

  std::vector<BpeMerge> merges;
  merges.reserve(target_merges);
  std::vector<std::pair<uint64_t, int64_t>> delta;  // (pair, change in count) for one word
  while (merges.size() < target_merges && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), HeapLess{});
    HeapItem top = heap.back();
    heap.pop_back();
    auto cit = counts.find(top.pair);
    int64_t current = cit == counts.end() ? 0 : cit->second;
    if (current != top.count) {
      if (current > 0) push({current, top.pair});
      continue;
    }
    if (current < 2) break;  // every remaining pair occurs once: nothing worth learning
    const int32_t a = static_cast<int32_t>(top.pair >> 32);
    const int32_t b = static_cast<int32_t>(top.pair & 0xffffffffu);
    const int32_t c = 256 + static_cast<int32_t>(merges.size());
    merges.push_back({a, b});

    std::vector<int32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    for (int32_t w : list) {
      auto& ids = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < ids.size() && !has; ++i) has = ids[i] == a && ids[i + 1] == b;
      if (!has) continue;
      const int64_t f = freq[w];
      delta.clear();
      for (size_t i = 0; i + 1 < ids.size(); ++i)
        delta.emplace_back(pack_pair(ids[i], ids[i + 1]), -f);
      ids.resize(merge_pair(ids.data(), ids.size(), a, b, c));
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        uint64_t key = pack_pair(ids[i], ids[i + 1]);
        delta.emplace_back(key, f);
        if (ids[i] == c || ids[i + 1] == c) {  // a pair that is new to this word
          auto& wl = where[key];
          if (wl.empty() || wl.back() != w) wl.push_back(w);
        }
      }
      std::sort(delta.begin(), delta.end());
      for (size_t i = 0; i < delta.size();) {
        uint64_t key = delta[i].first;
        int64_t net = 0;
        for (; i < delta.size() && delta[i].first == key; ++i) net += delta[i].second;
        if (net == 0) continue;
        int64_t& cnt = counts[key];
        cnt += net;
        if (net > 0) push({cnt, key});
        if (cnt == 0) counts.erase(key);
      }
    }
  }
  return from_merges(std::move(merges));
}

// ---- BpeTokenizer: serialization --------------------------------------------------------------

namespace {

constexpr std::string_view kMagic = "atoll-bpe 1";
constexpr std::string_view kPretokenizer = "pretokenizer atoll-chunks-1";

// Splits off the next '\n'-terminated line; false if there is none.
bool next_line(std::string_view& rest, std::string_view& line) {
  size_t nl = rest.find('\n');
  if (nl == std::string_view::npos) return false;
  line = rest.substr(0, nl);
  rest.remove_prefix(nl + 1);
  return true;
}

bool parse_int(std::string_view s, int64_t& v) {
  if (s.empty() || s.size() > 18) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string BpeTokenizer::serialize() const {
  std::string out;
  out.reserve(64 + merges_.size() * 12);
  out.append(kMagic).append("\n");
  out.append(kPretokenizer).append("\n");
  out.append("merges ").append(std::to_string(merges_.size())).append("\n");
  for (const BpeMerge& m : merges_)
    out.append(std::to_string(m.left)).append(" ").append(std::to_string(m.right)).append("\n");
  std::string digest = sha256_hex(out.data(), out.size());
  out.append("sha256 ").append(digest).append("\n");
  return out;
}

StatusOr<BpeTokenizer> BpeTokenizer::deserialize(std::string_view data) {
  const std::string_view all = data;
  std::string_view rest = data, line;
  int line_no = 0;
  auto bad = [&](const std::string& what) {
    return InvalidArgument("BPE tokenizer file, line " + std::to_string(line_no) + ": " + what);
  };
  ++line_no;
  if (!next_line(rest, line) || line != kMagic)
    return bad("expected '" + std::string(kMagic) + "' (not an Atoll BPE tokenizer file?)");
  ++line_no;
  if (!next_line(rest, line) || line != kPretokenizer)
    return bad("expected '" + std::string(kPretokenizer) +
               "' (written by an incompatible version?)");
  ++line_no;
  int64_t n = 0;
  if (!next_line(rest, line) || !line.starts_with("merges ") || !parse_int(line.substr(7), n) ||
      n < 0)
    return bad("expected 'merges <count>'");
  if (n > kMaxVocab - 256)
    return bad("merge count " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kMaxVocab - 256));
  std::vector<BpeMerge> merges;
  merges.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ++line_no;
    if (!next_line(rest, line))
      return bad("file ends after " + std::to_string(i) + " of " + std::to_string(n) + " merges");
    size_t sp = line.find(' ');
    int64_t l = 0, r = 0;
    if (sp == std::string_view::npos || !parse_int(line.substr(0, sp), l) ||
        !parse_int(line.substr(sp + 1), r))
      return bad("expected '<left id> <right id>', got '" + std::string(line.substr(0, 40)) + "'");
    const int64_t next_id = 256 + i;
    if (l < 0 || r < 0 || l >= next_id || r >= next_id)
      return bad("merge " + std::to_string(i) + " (" + std::to_string(l) + " " + std::to_string(r) +
                 ") refers to an id not defined before it (ids so far: 0.." +
                 std::to_string(next_id - 1) + ")");
    merges.push_back({static_cast<int32_t>(l), static_cast<int32_t>(r)});
  }
  const size_t body_size = all.size() - rest.size();
  ++line_no;
  if (!next_line(rest, line) || !line.starts_with("sha256 "))
    return bad("expected 'sha256 <hex>' after the merges");
  std::string digest = sha256_hex(all.data(), body_size);
  if (line.substr(7) != digest)
    return Status(StatusCode::kDataLoss, "BPE tokenizer file, line " + std::to_string(line_no) +
                                             ": checksum mismatch (file is corrupt or was edited)");
  if (!rest.empty()) return bad("unexpected data after the sha256 line");
  auto tok = from_merges(std::move(merges));
  if (!tok.ok()) return bad(tok.status().message());
  return tok;
}

}  // namespace atl::algorithms::data
