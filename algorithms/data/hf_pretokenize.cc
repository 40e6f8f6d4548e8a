#include "algorithms/data/hf_pretokenize.h"

#include <unicode/uchar.h>

#include <cstdint>

namespace atl::algorithms::data {

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A code point that is not one: a byte that does not start a valid UTF-8 sequence.
constexpr int32_t kInvalidByte = -1;

// One character of the text: its code point (or kInvalidByte) and where its bytes start.
struct Char {
  int32_t cp = 0;
  size_t begin = 0;
};

// Decodes UTF-8 strictly (no overlongs, no surrogates, at most U+10FFFF); every byte of an
// invalid sequence becomes one kInvalidByte character. chars gets a sentinel at text.size().
std::vector<Char> decode_utf8(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size() + 1);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    int len = 0;
    int32_t cp = 0, min = 0;
    if (b < 0x80)
      len = 1, cp = b;
    else if ((b & 0xE0) == 0xC0)
      len = 2, cp = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
      len = 3, cp = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
      len = 4, cp = b & 0x07, min = 0x10000;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) len = 1, cp = kInvalidByte;
    chars.push_back({cp, i});
    i += static_cast<size_t>(len);
  }
  chars.push_back({0, n});
  return chars;
}

bool is_letter(int32_t cp) {
  return cp >= 0 && (U_GET_GC_MASK(cp) & U_GC_L_MASK) != 0;
}
bool is_number(int32_t cp) {
  return cp >= 0 && (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0;
}
bool is_space(int32_t cp) {
  return cp >= 0 && u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE);
}
bool is_newline(int32_t cp) {
  return cp == '\r' || cp == '\n';
}
// [^\s\p{L}\p{N}]
bool is_other(int32_t cp) {
  return !is_space(cp) && !is_letter(cp) && !is_number(cp);
}

// Matches at character i of chars[0, n) and returns the end index, or i when nothing matched.
class Matcher {
 public:
  Matcher(const std::vector<Char>& chars, SplitPattern pattern)
      : c_(chars), n_(chars.size() - 1), pattern_(pattern) {}

  size_t match(size_t i) const {
    const bool fold = pattern_ != SplitPattern::kGpt2;
    if (size_t e = contraction(i, fold); e > i) return e;
    if (pattern_ == SplitPattern::kGpt2) {
      if (size_t e = optional_space_then_run(i, is_letter); e > i) return e;
      if (size_t e = optional_space_then_run(i, is_number); e > i) return e;
      if (size_t e = optional_space_then_run(i, is_other); e > i) return e;
    } else {
      if (size_t e = letters_after_optional_prefix(i); e > i) return e;
      if (size_t e = digits(i, pattern_ == SplitPattern::kLlama3 ? 3 : 1); e > i) return e;
      if (size_t e = optional_space_then_run(i, is_other); e > i) return run(e, is_newline);
      if (size_t e = spaces_through_last_newline(i); e > i) return e;
    }
    if (size_t e = spaces_not_followed_by_non_space(i); e > i) return e;
    return run(i, is_space);
  }

 private:
  int32_t cp(size_t i) const { return i < n_ ? c_[i].cp : kInvalidByte; }
  bool at(size_t i, char want, bool fold) const {
    const int32_t x = cp(i);
    if (x == want) return true;
    if (!fold) return false;
    if (want >= 'a' && want <= 'z' && x == want - 'a' + 'A') return true;
    return want == 's' && x == 0x017F;  // LATIN SMALL LETTER LONG S folds to s
  }
  // 's 't 're 've 'm 'll 'd
  size_t contraction(size_t i, bool fold) const {
    if (cp(i) != '\'') return i;
    for (std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      size_t k = 0;
      while (k < suffix.size() && at(i + 1 + k, suffix[k], fold)) ++k;
      if (k == suffix.size()) return i + 1 + k;
    }
    return i;
  }
  template <class Pred>
  size_t run(size_t i, Pred pred) const {
    while (i < n_ && pred(c_[i].cp)) ++i;
    return i;
  }
  // " ?X+"
  template <class Pred>
  size_t optional_space_then_run(size_t i, Pred pred) const {
    if (cp(i) == ' ' && i + 1 < n_ && pred(cp(i + 1))) return run(i + 1, pred);
    return i < n_ && pred(cp(i)) ? run(i, pred) : i;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t letters_after_optional_prefix(size_t i) const {
    const int32_t x = cp(i);
    if (i < n_ && !is_newline(x) && !is_letter(x) && !is_number(x) && is_letter(cp(i + 1)))
      return run(i + 1, is_letter);
    return is_letter(x) ? run(i, is_letter) : i;
  }
  // \p{N}{1,max}
  size_t digits(size_t i, size_t max) const {
    size_t e = i;
    while (e < n_ && e - i < max && is_number(c_[e].cp)) ++e;
    return e;
  }
  // \s*[\r\n]+ : the whitespace run from i, up to and including its last \r or \n.
  size_t spaces_through_last_newline(size_t i) const {
    const size_t end = run(i, is_space);
    for (size_t e = end; e > i; --e)
      if (is_newline(c_[e - 1].cp)) return e;
    return i;
  }
  // \s+(?!\S) : the whitespace run, less its last character when a non-space follows it.
  size_t spaces_not_followed_by_non_space(size_t i) const {
    const size_t end = run(i, is_space);
    if (end == i) return i;
    if (end == n_) return end;
    return end - 1 > i ? end - 1 : i;
  }

  const std::vector<Char>& c_;
  size_t n_;
  SplitPattern pattern_;
};

}  // namespace

std::string_view split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return kGpt2Regex;
    case SplitPattern::kLlama3:
      return kLlama3Regex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
  }
  return {};
}

const char* split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return "gpt2";
    case SplitPattern::kLlama3:
      return "llama3";
    case SplitPattern::kQwen2:
      return "qwen2";
  }
  return "";
}

StatusOr<SplitPattern> recognise_split_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2})
    if (regex == split_pattern_regex(p)) return p;
  std::string shown(regex.substr(0, 80));
  if (regex.size() > 80) shown += "...";
  return InvalidArgument("unsupported pre-tokenizer split pattern '" + shown +
                         "': Atoll implements the GPT-2, Llama-3 and Qwen2 patterns only");
}

std::vector<std::string_view> split_pretokens(std::string_view text, SplitPattern pattern) {
  const std::vector<Char> chars = decode_utf8(text);
  const size_t n = chars.size() - 1;
  const Matcher matcher(chars, pattern);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < n;) {
    size_t e = matcher.match(i);
    if (e <= i) e = i + 1;  // unreachable: every character matches some alternative
    pieces.push_back(text.substr(chars[i].begin, chars[e].begin - chars[i].begin));
    i = e;
  }
  return pieces;
}

}  // namespace atl::algorithms::data
