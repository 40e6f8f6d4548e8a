// Tokenizers: bytes (vocab 256) and a byte-level BPE trained by Atoll.
//
// Both are lossless on ANY byte string: decode(encode(x)) == x, valid UTF-8 or not, because
// every token is a byte string and ids 0..255 are the 256 single bytes. Neither has special
// tokens; documents are joined with a text separator (see dataset.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int32_t vocab_size() const = 0;
  // e.g. "bytes", "bpe-1024".
  virtual std::string name() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Several texts at once; the BPE shares its per-chunk cache across them, so encoding a corpus
  // document by document costs about as much as encoding it in one piece.
  virtual std::vector<std::vector<int32_t>> encode_many(
      std::span<const std::string_view> texts) const;
  // Ids outside [0, vocab_size) decode to U+FFFD (the Unicode replacement character), so a
  // corrupt id is visible in the output instead of silently dropped.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Length in bytes of the text token `id` stands for (0 for an id outside the vocabulary).
  // Used to count the bytes a batch of targets covers, for bits per byte.
  virtual int64_t token_bytes(int32_t id) const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  int32_t vocab_size() const override { return 256; }
  std::string name() const override { return "bytes"; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t token_bytes(int32_t id) const override { return id >= 0 && id < 256 ? 1 : 0; }
};

// Pre-tokenization (GPT-2-like, by hand, over bytes): text is cut into chunks and BPE merges
// never cross a chunk boundary. Byte classes: letters are ASCII letters AND every byte >= 0x80
// (so a UTF-8 word stays one chunk), digits are 0-9, spaces are ' ' \t \n \v \f \r, everything
// else is punctuation. Chunks, in order of precedence:
//   - an English contraction suffix: 's 't 'm 'd 're 've 'll
//   - an optional single ' ' followed by a run of letters, or of digits, or of punctuation
//   - a run of spaces; when a run is followed by a non-space, its last byte is left out, and
//     joins the next chunk if it is ' ' (so " the" is one chunk), else stands alone.
// Chunks longer than kMaxChunkBytes are cut every kMaxChunkBytes bytes (bounds the work per
// chunk on pathological input such as a megabyte of dashes).
inline constexpr size_t kMaxChunkBytes = 64;
// The chunks of `text`, in order; their concatenation is `text`.
std::vector<std::string_view> split_chunks(std::string_view text);

struct BpeMerge {
  int32_t left = 0, right = 0;  // token ids; merge i creates id 256 + i
  bool operator==(const BpeMerge&) const = default;
};

// Open-addressing hash map (pair of ids -> merged id): the hot lookup of encode.
class PairRankMap {
 public:
  void build(std::span<const BpeMerge> merges);
  // The id `left right` merges into, or -1.
  int32_t find(int32_t left, int32_t right) const {
    if (slots_.empty()) return -1;
    uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == kEmpty) return -1;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    int32_t value = -1;
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 17); }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Largest vocabulary train/deserialize accept (ids must also fit the model's embedding).
  static constexpr int32_t kMaxVocab = 1 << 20;

  // Byte-level BPE over the chunks of `texts` (see split_chunks). Deterministic: each step
  // merges the most frequent adjacent pair (counted over all chunk occurrences); ties go to
  // the lowest (left, right) ids. Pair counts are updated incrementally (only the chunks that
  // contain the merged pair are touched). Stops early, with a smaller vocabulary, when no
  // pair occurs at least twice. vocab_size in [256, kMaxVocab].
  static StatusOr<BpeTokenizer> train(std::span<const std::string_view> texts, int32_t vocab_size);
  // From an explicit merge list (validated like deserialize).
  static StatusOr<BpeTokenizer> from_merges(std::vector<BpeMerge> merges);

  // Text format (one item per line):
  //   atoll-bpe 1
  //   pretokenizer atoll-chunks-1
  //   merges <N>
  //   <left> <right>          N lines, merge i creates id 256 + i
  //   sha256 <hex of every byte above this line>
  std::string serialize() const;
  // Rejects, with one line saying what and where, anything serialize() would not write: wrong
  // header, bad numbers, a merge that refers to an id not yet defined, a repeated pair, a
  // count mismatch, a checksum mismatch, trailing data.
  static StatusOr<BpeTokenizer> deserialize(std::string_view data);

  int32_t vocab_size() const override { return 256 + static_cast<int32_t>(merges_.size()); }
  std::string name() const override { return "bpe-" + std::to_string(vocab_size()); }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<std::vector<int32_t>> encode_many(
      std::span<const std::string_view> texts) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t token_bytes(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? static_cast<int64_t>(pieces_[id].size()) : 0;
  }
  const std::vector<BpeMerge>& merges() const { return merges_; }
  // The bytes of token `id` (id in [0, vocab_size)).
  const std::string& piece(int32_t id) const { return pieces_[id]; }

  // Encodes one chunk (no cache), appending to `out`. Exposed for tests.
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

 private:
  BpeTokenizer() = default;
  std::vector<BpeMerge> merges_;
  std::vector<std::string> pieces_;  // id -> bytes
  PairRankMap ranks_;
};

}  // namespace atl::algorithms::data
