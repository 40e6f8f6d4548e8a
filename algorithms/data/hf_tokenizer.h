// Hugging Face `tokenizer.json` byte-level BPE (GPT-2, Llama-3, Qwen2 and their relatives).
//
// Supported: model.type "BPE" with a vocab and merges ("a b" strings or ["a", "b"] pairs),
// ignore_merges; normalizer null or NFC; pre_tokenizer ByteLevel (GPT-2 split) or a Sequence of
// Split (a pattern of hf_pretokenize.h, behavior Isolated) and ByteLevel without its own split;
// decoder ByteLevel; added_tokens without lstrip/rstrip/single_word. Anything else is refused
// with one line naming it. The post_processor (a BOS the Hugging Face library adds on request)
// is not applied: encode() returns the text's tokens only.
//
// Encoding: added tokens are found first (leftmost, longest at a position) and become their ids;
// the text between them is NFC-normalized when the file asks for it, cut by the split pattern,
// each piece's UTF-8 bytes mapped through the GPT-2 byte<->unicode table, and merged: the pair
// with the lowest merge rank (the leftmost among equals) merges first, until no pair of the
// piece has a rank. With ignore_merges a piece that is itself in the vocabulary is that one id.
// Decoding concatenates the bytes of the tokens (added tokens: their content), so
// decode(encode(x)) == x for any x that NFC leaves unchanged (any x without an NFC normalizer).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "algorithms/data/hf_pretokenize.h"
#include "algorithms/data/tokenizer.h"
#include "kernels/core/status.h"

namespace atl::algorithms::data {

// The GPT-2 byte -> unicode table: printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to
// themselves, the other 68 bytes to U+0100, U+0101, ... in byte order. Returned as UTF-8.
const std::array<std::string, 256>& byte_level_alphabet();
// The inverse: the raw bytes a byte-level string stands for; InvalidArgument naming the first
// character that is not in the table.
StatusOr<std::string> byte_level_to_bytes(std::string_view byte_level);
std::string bytes_to_byte_level(std::string_view bytes);

// The byte tokenizer (id = the byte's value, 256 ids) as a Hugging Face tokenizer.json: a
// ByteLevel BPE whose vocabulary is the 256 byte-level tokens in byte order and which has no
// merges, so it encodes every text to its bytes, as ByteTokenizer does, in `tokenizers` and here.
std::string byte_tokenizer_json();

class HfBpeTokenizer final : public Tokenizer {
 public:
  // From the text of a tokenizer.json (see the header comment for what is accepted).
  static StatusOr<HfBpeTokenizer> from_json(std::string_view tokenizer_json);

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::string name() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<std::vector<int32_t>> encode_many(
      std::span<const std::string_view> texts) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t token_bytes(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? static_cast<int64_t>(pieces_[id].size()) : 0;
  }

  SplitPattern split_pattern() const { return pattern_; }
  // The id of an added token's content, or -1.
  int32_t added_token_id(std::string_view content) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
  };
  struct Merge {
    int32_t rank = 0, id = 0;
  };
  using Cache = std::unordered_map<std::string, std::vector<int32_t>>;

  HfBpeTokenizer() = default;
  void encode_into(std::string_view text, Cache& cache, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, Cache& cache, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  SplitPattern pattern_ = SplitPattern::kGpt2;
  bool nfc_ = false, ignore_merges_ = false;
  std::vector<std::string> pieces_;                      // id -> bytes ("" for an unused id)
  std::unordered_map<std::string, int32_t> by_bytes_;    // vocab: bytes -> id
  std::array<int32_t, 256> byte_ids_{};                  // id of each single byte
  std::unordered_map<uint64_t, Merge> merges_;           // (left, right) -> rank, merged id
  std::vector<AddedToken> added_;                        // longest first
  std::array<std::vector<size_t>, 256> added_by_first_;  // first byte -> indices into added_
};

// The tokenizer a tokenizer.json describes.
StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer(std::string_view tokenizer_json);

}  // namespace atl::algorithms::data
