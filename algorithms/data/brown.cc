#include "algorithms/data/brown.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/core/sha256.h"

namespace atl::algorithms::data {

namespace {

constexpr std::array<BrownGenre, 15> kGenres = {{
    {'a', "news", 44},
    {'b', "editorial", 27},
    {'c', "reviews", 17},
    {'d', "religion", 17},
    {'e', "hobbies", 36},
    {'f', "lore", 48},
    {'g', "belles_lettres", 75},
    {'h', "government", 30},
    {'j', "learned", 80},
    {'k', "fiction", 29},
    {'l', "mystery", 24},
    {'m', "science_fiction", 6},
    {'n', "adventure", 29},
    {'p', "romance", 29},
    {'r', "humor", 9},
}};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

struct Token {
  std::string_view word, tag;
};

// Whitespace-separated tokens of one line, split at the last '/'.
void tokenize_line(std::string_view line, std::vector<Token>& out) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (j > i) {
      std::string_view tok = line.substr(i, j - i);
      size_t slash = tok.rfind('/');
      if (slash == std::string_view::npos) {
        out.push_back({tok, {}});
      } else {
        out.push_back({tok.substr(0, slash), tok.substr(slash + 1)});
      }
    }
    i = j;
  }
}

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

// Tokens written without a space before them.
bool attaches_left(std::string_view w) {
  if (w.empty()) return false;
  if (w.find_first_not_of(",.;:!?") == std::string_view::npos) return true;  // , . ... ?! etc.
  if (w == ")" || w == "]" || w == "}" || w == "%") return true;
  for (std::string_view clitic : {"'s", "'re", "'ve", "'ll", "'d", "'m", "n't"})
    if (equals_lower(w, clitic)) return true;
  return false;
}

// Tokens written without a space after them.
bool attaches_right(std::string_view w) {
  return w == "(" || w == "[" || w == "{" || w == "$";
}

// Appends one paragraph of tokens as readable text.
void append_paragraph(const std::vector<Token>& tokens, std::string& out) {
  if (tokens.empty()) return;
  if (!out.empty()) out.append("\n\n");
  bool first = true, glue_next = false, single_open = false;
  const Token* prev = nullptr;
  for (const Token& t : tokens) {
    // The corpus doubles sentence-final ; ? ! : (";/. ;/."), thousands of times: write one.
    const bool doubled = prev && prev->word == t.word && t.tag.starts_with(".") &&
                         prev->tag.starts_with(".") &&
                         (t.word == ";" || t.word == "?" || t.word == "!" || t.word == ":");
    prev = &t;
    if (doubled) continue;
    std::string_view text = t.word;
    bool left = false, right = false;
    if (t.word == "``") {
      text = "\"";
      right = true;
    } else if (t.word == "''") {
      text = "\"";
      left = true;
    } else if (t.word == "'") {
      single_open = !single_open;
      (single_open ? right : left) = true;
    } else {
      left = attaches_left(t.word);
      right = attaches_right(t.word);
    }
    if (!first && !glue_next && !left) out.push_back(' ');
    out.append(text);
    first = false;
    glue_next = right;
  }
}

bool is_headline(const std::vector<Token>& tokens) {
  size_t hl = 0;
  for (const Token& t : tokens) hl += t.tag.ends_with("-hl");
  return !tokens.empty() && 2 * hl > tokens.size();
}

uint64_t split_key(std::string_view name, Sha256Digest* full = nullptr) {
  std::string salted = "atoll-split:";
  salted.append(name);
  Sha256Digest d = sha256(salted.data(), salted.size());
  if (full) *full = d;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return v;
}

std::string brown_name(char letter, int number) {
  std::string n = "c";
  n.push_back(letter);
  n.push_back(static_cast<char>('0' + number / 10));
  n.push_back(static_cast<char>('0' + number % 10));
  return n;
}

}  // namespace

std::span<const BrownGenre> brown_genres() {
  return kGenres;
}

const BrownGenre* find_brown_genre(char letter) {
  for (const BrownGenre& g : kGenres)
    if (g.letter == letter) return &g;
  return nullptr;
}

bool is_brown_document_name(std::string_view name) {
  if (name.size() != 4 || name[0] != 'c') return false;
  const BrownGenre* g = find_brown_genre(name[1]);
  if (!g || name[2] < '0' || name[2] > '9' || name[3] < '0' || name[3] > '9') return false;
  int number = (name[2] - '0') * 10 + (name[3] - '0');
  return number >= 1 && number <= g->documents;
}

std::string brown_to_text(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size() * 3 / 4);
  std::vector<Token> paragraph, line_tokens;
  size_t pos = 0;
  while (pos <= tagged.size()) {
    size_t nl = tagged.find('\n', pos);
    if (nl == std::string_view::npos) nl = tagged.size();
    std::string_view line = tagged.substr(pos, nl - pos);
    pos = nl + 1;
    line_tokens.clear();
    tokenize_line(line, line_tokens);
    if (line_tokens.empty()) {  // blank line: paragraph break
      append_paragraph(paragraph, out);
      paragraph.clear();
    } else if (is_headline(line_tokens)) {
      append_paragraph(paragraph, out);
      paragraph.clear();
      append_paragraph(line_tokens, out);
    } else {
      paragraph.insert(paragraph.end(), line_tokens.begin(), line_tokens.end());
    }
  }
  append_paragraph(paragraph, out);
  return out;
}

bool is_validation(const Document& doc) {
  if (!is_brown_document_name(doc.name)) return split_key(doc.name) % 10 == 0;
  const BrownGenre* g = find_brown_genre(doc.name[1]);
  const int k = std::max(1, (g->documents + 5) / 10);
  // Rank of this document's digest among its genre's: validation if fewer than k are smaller.
  Sha256Digest mine;
  split_key(doc.name, &mine);
  int smaller = 0;
  for (int i = 1; i <= g->documents; ++i) {
    Sha256Digest other;
    split_key(brown_name(g->letter, i), &other);
    smaller += other < mine;
  }
  return smaller < k;
}

}  // namespace atl::algorithms::data
