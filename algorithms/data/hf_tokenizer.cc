#include "algorithms/data/hf_tokenizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <limits>

#include "algorithms/data/utf8.h"

namespace atl::algorithms::data {

namespace json = boost::json;

namespace {

std::string utf8_of(int32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Code point -> byte for the byte-level alphabet (every code point is below U+0144).
constexpr int32_t kAlphabetLimit = 0x144;
const std::array<int16_t, kAlphabetLimit>& byte_of_code_point() {
  static const std::array<int16_t, kAlphabetLimit> table = [] {
    std::array<int16_t, kAlphabetLimit> t;
    t.fill(-1);
    int32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[printable ? b : next++] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string nfc(std::string_view text) {
  if (is_ascii(text) || first_invalid_utf8(text) != std::string_view::npos)
    return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return std::string(text);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                   nullptr, err);
  return U_SUCCESS(err) ? out : std::string(text);
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// `s` in single quotes (appended piecewise: GCC 12 warns falsely on "'" + std::string).
std::string single_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

std::string kind_name(const json::value& v) {
  return std::string(json::to_string(v.kind()));
}

// The "type" of a component object, or "" when it has none.
std::string type_of(const json::value& v) {
  if (!v.is_object()) return "";
  const json::value* t = v.as_object().if_contains("type");
  return t && t->is_string() ? std::string(t->as_string()) : "";
}

bool flag(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_bool() && v->as_bool();
}

bool null_or_absent(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null();
}

bool empty_string_or_null(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() || (v->is_string() && v->as_string().empty());
}

Status unsupported(const std::string& what) {
  return InvalidArgument("tokenizer.json: " + what +
                         " is not supported (Atoll reads byte-level BPE tokenizers such as "
                         "GPT-2, Llama-3 and Qwen2)");
}

// ByteLevel with no prefix space; `split` says whether it runs the GPT-2 split itself.
Status check_byte_level(const json::object& o, bool* split) {
  if (flag(o, "add_prefix_space")) return unsupported("ByteLevel with add_prefix_space true");
  const json::value* use_regex = o.if_contains("use_regex");
  *split = use_regex == nullptr || !use_regex->is_bool() || use_regex->as_bool();
  return Status::Ok();
}

StatusOr<SplitPattern> parse_split(const json::object& o) {
  const json::value* pattern = o.if_contains("pattern");
  const json::value* regex =
      pattern && pattern->is_object() ? pattern->as_object().if_contains("Regex") : nullptr;
  if (regex == nullptr || !regex->is_string())
    return unsupported("a Split pre-tokenizer without a {\"Regex\": ...} pattern");
  const json::value* behavior = o.if_contains("behavior");
  if (behavior && !(behavior->is_string() && behavior->as_string() == "Isolated"))
    return unsupported("a Split pre-tokenizer with behavior other than Isolated");
  if (flag(o, "invert")) return unsupported("an inverted Split pre-tokenizer");
  return recognise_split_pattern(std::string_view(regex->as_string()));
}

StatusOr<SplitPattern> parse_pre_tokenizer(const json::value& v) {
  const std::string type = type_of(v);
  bool split = false;
  if (type == "ByteLevel") {
    ATOLL_RETURN_IF_ERROR(check_byte_level(v.as_object(), &split));
    if (!split) return unsupported("a ByteLevel pre-tokenizer with use_regex false and no Split");
    return SplitPattern::kGpt2;
  }
  if (type != "Sequence")
    return unsupported("pre_tokenizer '" + (type.empty() ? kind_name(v) : type) + "'");
  const json::value* list = v.as_object().if_contains("pretokenizers");
  if (!list || !list->is_array() || list->as_array().size() != 2 ||
      type_of(list->as_array()[0]) != "Split" || type_of(list->as_array()[1]) != "ByteLevel")
    return unsupported("a pre_tokenizer Sequence other than [Split, ByteLevel]");
  ATOLL_ASSIGN_OR_RETURN(SplitPattern pattern, parse_split(list->as_array()[0].as_object()));
  ATOLL_RETURN_IF_ERROR(check_byte_level(list->as_array()[1].as_object(), &split));
  if (split) return unsupported("a ByteLevel with use_regex true after a Split");
  return pattern;
}

// "a b" or ["a", "b"] -> the two byte-level strings.
StatusOr<std::pair<std::string, std::string>> merge_parts(const json::value& m, size_t index) {
  const std::string where = "tokenizer.json: merge " + std::to_string(index);
  if (m.is_string()) {
    const std::string_view s(m.as_string());
    const size_t space = s.find(' ');
    if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos)
      return InvalidArgument(where + " '" + std::string(s) +
                             "' is not two tokens separated by one space");
    return std::make_pair(std::string(s.substr(0, space)), std::string(s.substr(space + 1)));
  }
  if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() &&
      m.as_array()[1].is_string())
    return std::make_pair(std::string(m.as_array()[0].as_string()),
                          std::string(m.as_array()[1].as_string()));
  return InvalidArgument(where + " is a " + kind_name(m) + ", expected \"a b\" or [\"a\", \"b\"]");
}

}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    const auto& inverse = byte_of_code_point();
    for (int32_t cp = 0; cp < kAlphabetLimit; ++cp)
      if (inverse[cp] >= 0) t[inverse[cp]] = utf8_of(cp);
    return t;
  }();
  return table;
}

StatusOr<std::string> byte_level_to_bytes(std::string_view byte_level) {
  const auto& inverse = byte_of_code_point();
  const auto* p = reinterpret_cast<const uint8_t*>(byte_level.data());
  const int32_t n = static_cast<int32_t>(byte_level.size());
  std::string out;
  out.reserve(byte_level.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0 || c >= kAlphabetLimit || inverse[c] < 0)
      return InvalidArgument(single_quoted(byte_level) +
                             " holds a character outside the byte-level alphabet");
    out.push_back(static_cast<char>(inverse[c]));
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& table = byte_level_alphabet();
  std::string out;
  for (char b : bytes) out += table[static_cast<unsigned char>(b)];
  return out;
}

std::string byte_tokenizer_json() {
  const auto& alphabet = byte_level_alphabet();
  json::object vocab;
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  const json::object byte_level = {{"type", "ByteLevel"},
                                   {"add_prefix_space", false},
                                   {"trim_offsets", true},
                                   {"use_regex", true}};
  const json::object model = {{"type", "BPE"},
                              {"dropout", nullptr},
                              {"unk_token", nullptr},
                              {"continuing_subword_prefix", nullptr},
                              {"end_of_word_suffix", nullptr},
                              {"fuse_unk", false},
                              {"byte_fallback", false},
                              {"ignore_merges", false},
                              {"vocab", vocab},
                              {"merges", json::array()}};
  return json::serialize(json::object{{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", json::array()},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer", byte_level},
                                      {"post_processor", nullptr},
                                      {"decoder", byte_level},
                                      {"model", model}});
}

StatusOr<HfBpeTokenizer> HfBpeTokenizer::from_json(std::string_view tokenizer_json) {
  json::error_code ec;
  json::value root =
      json::parse(json::string_view(tokenizer_json.data(), tokenizer_json.size()), ec);
  if (ec) return InvalidArgument("tokenizer.json is not valid JSON: " + ec.message());
  if (!root.is_object()) return InvalidArgument("tokenizer.json: the top level is not an object");
  const json::object& top = root.as_object();
  const json::value* model_v = top.if_contains("model");
  if (!model_v || !model_v->is_object())
    return InvalidArgument("tokenizer.json has no \"model\" object");
  const json::object& model = model_v->as_object();
  if (const std::string t = type_of(*model_v); !t.empty() && t != "BPE")
    return unsupported("model type '" + t + "'");
  if (!null_or_absent(model, "dropout")) return unsupported("BPE dropout");
  if (flag(model, "byte_fallback")) return unsupported("BPE byte_fallback");
  if (!empty_string_or_null(model, "continuing_subword_prefix") ||
      !empty_string_or_null(model, "end_of_word_suffix"))
    return unsupported("a BPE continuing_subword_prefix or end_of_word_suffix");

  HfBpeTokenizer tok;
  tok.ignore_merges_ = flag(model, "ignore_merges");
  if (const json::value* norm = top.if_contains("normalizer"); norm && !norm->is_null()) {
    if (type_of(*norm) != "NFC") return unsupported("normalizer '" + type_of(*norm) + "'");
    tok.nfc_ = true;
  }
  const json::value* pre = top.if_contains("pre_tokenizer");
  if (!pre || pre->is_null()) return unsupported("a tokenizer without a pre_tokenizer");
  ATOLL_ASSIGN_OR_RETURN(tok.pattern_, parse_pre_tokenizer(*pre));
  if (const json::value* dec = top.if_contains("decoder");
      !dec || dec->is_null() || type_of(*dec) != "ByteLevel")
    return unsupported("decoder '" + (dec && !dec->is_null() ? type_of(*dec) : "null") +
                       "' (a ByteLevel decoder is required)");

  // Vocabulary: byte-level strings -> ids, stored as raw bytes.
  const json::value* vocab = model.if_contains("vocab");
  if (!vocab || !vocab->is_object())
    return InvalidArgument("tokenizer.json: model.vocab is not an object");
  constexpr int64_t kMaxId = BpeTokenizer::kMaxVocab * 4;
  auto grow = [&tok](int64_t id) {
    if (static_cast<size_t>(id) >= tok.pieces_.size())
      tok.pieces_.resize(static_cast<size_t>(id) + 1);
  };
  for (const auto& kv : vocab->as_object()) {
    const std::string_view key(kv.key().data(), kv.key().size());
    if (!kv.value().is_int64() || kv.value().as_int64() < 0 || kv.value().as_int64() >= kMaxId)
      return InvalidArgument("tokenizer.json: vocab entry '" + std::string(key) +
                             "' has an id that is not an integer in [0, " + std::to_string(kMaxId) +
                             ")");
    auto bytes = byte_level_to_bytes(key);
    if (!bytes.ok())
      return InvalidArgument("tokenizer.json: vocab entry " + bytes.status().message());
    const int64_t id = kv.value().as_int64();
    grow(id);
    if (!tok.pieces_[id].empty() || !tok.by_bytes_.emplace(*bytes, static_cast<int32_t>(id)).second)
      return InvalidArgument("tokenizer.json: vocab entry '" + std::string(key) +
                             "' repeats an id or a token");
    tok.pieces_[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = tok.by_bytes_.find(std::string(1, static_cast<char>(b)));
    if (it == tok.by_bytes_.end())
      return InvalidArgument("tokenizer.json: the vocab lacks the byte-level token of byte " +
                             std::to_string(b) + " ('" + byte_level_alphabet()[b] + "')");
    tok.byte_ids_[b] = it->second;
  }

  const json::value* merges = model.if_contains("merges");
  if (!merges || !merges->is_array())
    return InvalidArgument("tokenizer.json: model.merges is not an array");
  const json::array& list = merges->as_array();
  for (size_t i = 0; i < list.size(); ++i) {
    ATOLL_ASSIGN_OR_RETURN(auto parts, merge_parts(list[i], i));
    auto left = byte_level_to_bytes(parts.first), right = byte_level_to_bytes(parts.second);
    if (!left.ok() || !right.ok())
      return InvalidArgument("tokenizer.json: merge " + std::to_string(i) + ": " +
                             (left.ok() ? right : left).status().message());
    auto l = tok.by_bytes_.find(*left), r = tok.by_bytes_.find(*right),
         m = tok.by_bytes_.find(*left + *right);
    if (l == tok.by_bytes_.end() || r == tok.by_bytes_.end() || m == tok.by_bytes_.end())
      return InvalidArgument("tokenizer.json: merge " + std::to_string(i) + " ('" + parts.first +
                             " " + parts.second +
                             "') uses or makes a token that is not in the vocab");
    // A repeated pair keeps its first (lowest) rank, as the Hugging Face library does.
    tok.merges_.emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(i), m->second});
  }

  if (const json::value* added = top.if_contains("added_tokens"); added && !added->is_null()) {
    if (!added->is_array()) return InvalidArgument("tokenizer.json: added_tokens is not an array");
    for (const json::value& a : added->as_array()) {
      const json::object* o = a.if_object();
      const json::value* id = o ? o->if_contains("id") : nullptr;
      const json::value* content = o ? o->if_contains("content") : nullptr;
      if (!id || !id->is_int64() || id->as_int64() < 0 || id->as_int64() >= kMaxId || !content ||
          !content->is_string() || content->as_string().empty())
        return InvalidArgument("tokenizer.json: an added token without a valid id and content");
      const std::string text(content->as_string());
      if (flag(*o, "lstrip") || flag(*o, "rstrip") || flag(*o, "single_word"))
        return unsupported("added token '" + text + "' with lstrip, rstrip or single_word");
      grow(id->as_int64());
      std::string& piece = tok.pieces_[id->as_int64()];
      if (!piece.empty() && piece != text)
        return InvalidArgument("tokenizer.json: added token '" + text + "' reuses id " +
                               std::to_string(id->as_int64()) + " of another token");
      piece = text;
      tok.added_.push_back({text, static_cast<int32_t>(id->as_int64())});
    }
  }
  std::stable_sort(
      tok.added_.begin(), tok.added_.end(),
      [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < tok.added_.size(); ++i)
    tok.added_by_first_[static_cast<unsigned char>(tok.added_[i].content[0])].push_back(i);
  if (tok.pieces_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return InvalidArgument("tokenizer.json: too many ids");
  return tok;
}

std::string HfBpeTokenizer::name() const {
  return std::string("hf-bpe-") + split_pattern_name(pattern_) + "-" + std::to_string(vocab_size());
}

int32_t HfBpeTokenizer::added_token_id(std::string_view content) const {
  for (const AddedToken& a : added_)
    if (a.content == content) return a.id;
  return -1;
}

const HfBpeTokenizer::Merge* HfBpeTokenizer::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void HfBpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto it = by_bytes_.find(std::string(piece)); it != by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (char b : piece) ids.push_back(byte_ids_[static_cast<unsigned char>(b)]);
  // Lowest rank first, leftmost among equal ranks; one merge at a time. Pieces are short
  // (a word), so the quadratic scan is cheaper than a heap.
  while (ids.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const Merge* m = find_merge(ids[i], ids[i + 1]);
      if (m && m->rank < best_rank) best_rank = m->rank, best_id = m->id, best_at = i;
    }
    if (best_id < 0) break;
    ids[best_at] = best_id;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best_at) + 1);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void HfBpeTokenizer::encode_plain(std::string_view text, Cache& cache,
                                  std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = nfc_ ? nfc(text) : std::string();
  const std::string_view source = nfc_ ? std::string_view(normalized) : text;
  for (std::string_view piece : split_pretokens(source, pattern_)) {
    auto [it, inserted] = cache.try_emplace(std::string(piece));
    if (inserted) encode_piece(piece, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

void HfBpeTokenizer::encode_into(std::string_view text, Cache& cache,
                                 std::vector<int32_t>& out) const {
  size_t plain_begin = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (size_t k : added_by_first_[static_cast<unsigned char>(text[i])])
      if (text.compare(i, added_[k].content.size(), added_[k].content) == 0) {
        hit = &added_[k];  // longest first
        break;
      }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain_begin, i - plain_begin), cache, out);
    out.push_back(hit->id);
    i += hit->content.size();
    plain_begin = i;
  }
  encode_plain(text.substr(plain_begin), cache, out);
}

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text) const {
  Cache cache;
  std::vector<int32_t> out;
  encode_into(text, cache, out);
  return out;
}

std::vector<std::vector<int32_t>> HfBpeTokenizer::encode_many(
    std::span<const std::string_view> texts) const {
  Cache cache;
  std::vector<std::vector<int32_t>> out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) encode_into(texts[i], cache, out[i]);
  return out;
}

std::string HfBpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size() && !pieces_[id].empty())
      out += pieces_[id];
    else
      out += "\xEF\xBF\xBD";  // U+FFFD: an id outside the vocabulary, or one it leaves unused
  }
  return out;
}

StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer(std::string_view tokenizer_json) {
  ATOLL_ASSIGN_OR_RETURN(HfBpeTokenizer tok, HfBpeTokenizer::from_json(tokenizer_json));
  return std::unique_ptr<Tokenizer>(std::make_unique<HfBpeTokenizer>(std::move(tok)));
}

}  // namespace atl::algorithms::data
