// Hugging Face tokenizer.json byte-level BPE: ids and pre-tokenizer pieces against an
// independent Python implementation (tests/tools/hf_bpe_reference.py, the `regex` module) run by
// the test on tokenizer.json files the test builds (GPT-2, Llama-3 and Qwen2 patterns, merges
// trained by Atoll's BPE trainer, added/special tokens); lossless round trips on all of Brown;
// one clear line for what is not supported.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "algorithms/data/hf_pretokenize.h"
#include "algorithms/data/hf_tokenizer.h"
#include "data_test_util.h"

namespace atl::algorithms::data {
namespace {

namespace json = boost::json;
using testing::all_brown;
using testing::all_brown_text;
using testing::brown_bpe_1024;

struct Variant {
  SplitPattern pattern;
  bool merges_as_pairs = false;  // ["a", "b"] instead of "a b"
  bool ignore_merges = false;
  bool nfc = false;
  std::vector<std::string> added;  // added (special) tokens, ids after the vocabulary
};

// A tokenizer.json whose vocabulary and merges are Atoll's Brown BPE (vocab 1024) in byte-level
// form. Distinct merges that make the same bytes share the first id (tokenizer.json maps each
// string to one id), so ids are renumbered densely in order of first appearance.
std::string make_tokenizer_json(const Variant& v, const BpeTokenizer& bpe = brown_bpe_1024()) {
  json::object vocab;
  for (int32_t id = 0; id < bpe.vocab_size(); ++id) {
    const std::string key = bytes_to_byte_level(bpe.piece(id));
    if (!vocab.contains(key)) vocab[key] = static_cast<int64_t>(vocab.size());
  }
  json::array merges;
  for (const BpeMerge& m : bpe.merges()) {
    const std::string l = bytes_to_byte_level(bpe.piece(m.left)),
                      r = bytes_to_byte_level(bpe.piece(m.right));
    if (v.merges_as_pairs)
      merges.push_back(json::array{json::string(l), json::string(r)});
    else
      merges.push_back(json::string(l + " " + r));
  }
  json::object model{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", v.ignore_merges},
                     {"vocab", vocab},
                     {"merges", merges}};
  json::array added;
  int64_t next = static_cast<int64_t>(vocab.size());
  for (const std::string& a : v.added)
    added.push_back(json::object{{"id", next++},
                                 {"content", a},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  json::object byte_level{
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  json::value pre;
  if (v.pattern == SplitPattern::kGpt2) {
    byte_level["use_regex"] = true;
    pre = byte_level;
  } else {
    byte_level["use_regex"] = false;
    json::object split{
        {"type", "Split"},
        {"pattern", json::object{{"Regex", std::string(split_pattern_regex(v.pattern))}}},
        {"behavior", "Isolated"},
        {"invert", false}};
    pre = json::object{{"type", "Sequence"}, {"pretokenizers", json::array{split, byte_level}}};
  }
  json::object top{{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", v.nfc ? json::value(json::object{{"type", "NFC"}}) : nullptr},
                   {"pre_tokenizer", pre},
                   {"post_processor", nullptr},
                   {"decoder", json::object{{"type", "ByteLevel"},
                                            {"add_prefix_space", true},
                                            {"trim_offsets", true},
                                            {"use_regex", true}}},
                   {"model", model}};
  return json::serialize(top);
}

const Variant kGpt2{SplitPattern::kGpt2, false, false, false, {"<|endoftext|>"}};
const Variant kLlama3{
    SplitPattern::kLlama3,
    true,
    true,
    false,
    {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>"}};
const Variant kQwen2{
    SplitPattern::kQwen2, false, false, true, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}};

// Texts that exercise every alternative of the three patterns.
std::vector<std::string> varied_texts() {
  std::vector<std::string> texts;
  const auto& docs = all_brown();
  for (size_t i = 3; i < docs.size(); i += 61) texts.push_back(docs[i].text.substr(0, 1500));
  texts.insert(
      texts.end(),
      {
          "I'M sure you'RE right; don't, won't, she'll, we'd, they've, it's, IT'S, 'Tis",
          "the year 1961: 3.14159, 1,000,000 and 12345678901 items; phone 555-0199",
          "a  b   c\t\td \n\n  \r\n x   \n",
          "   leading and trailing   ",
          "\n\n\nlines\r\n\r\nend\n",
          "Ünïcödé: naïve café, Straße, ΑΘΗΝΑ αθήνα, Москва, 東京は晴れ。 مرحبا ١٢٣ ४५६ "
          "ｆｕｌｌ１２３",
          "emoji 🙂👍🏽 and symbols ©®™ — “quotes” ‘single’ …",
          "combining e\u0301 vs precomposed \u00e9, ohm \u2126, angstrom \u212b",
          "hello<|endoftext|>world <|im_start|>user\nhi<|im_end|>\n<|begin_of_text|><|eot_id|>x",
          "<|endoftext|><|endoftext|> spaced <|endoftext|>",
          "mixed123abc 4five six7 ٣apples x²+y³ ½",
          "'s's 'S 'LL 'Ll 're 'rE ''  ' tail'",
          "tabs\tand\u00a0nbsp\u2003em-space\u3000ideographic",
      });
  return texts;
}

std::string python() {
  const char* env = std::getenv("ATOLL_PYTHON");
  return env && *env ? env : ATOLL_PYTHON;
}

struct Reference {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<std::string>> pieces;
};

// Runs the Python reference on `texts` with the tokenizer.json `spec`.
Reference run_reference(const std::string& spec, const std::vector<std::string>& texts,
                        const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("atoll-hf-tok-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << spec;
  json::array list;
  for (const std::string& t : texts) list.push_back(json::string(t));
  std::ofstream(dir / "texts.json") << json::serialize(list);
  const std::string cmd = python() + " " + ATOLL_SOURCE_DIR + "/tests/tools/hf_bpe_reference.py " +
                          (dir / "tokenizer.json").string() + " " + (dir / "texts.json").string() +
                          " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd << "\n"
                            << out.substr(0, 2000)
                            << "\n(the reference needs Python's regex module: python3-regex, "
                               "deploy/install-deps.sh; ATOLL_PYTHON picks the interpreter)";
  }
  fs::remove_all(dir);
  Reference ref;
  json::error_code ec;
  json::value v = json::parse(out, ec);
  if (ec || !v.is_array()) {
    ADD_FAILURE() << "reference output is not a JSON list: " << out.substr(0, 2000);
    return ref;
  }
  for (const json::value& r : v.as_array()) {
    std::vector<int32_t> ids;
    for (const json::value& id : r.at("ids").as_array())
      ids.push_back(static_cast<int32_t>(id.as_int64()));
    std::vector<std::string> pieces;
    for (const json::value& p : r.at("pieces").as_array()) pieces.emplace_back(p.as_string());
    ref.ids.push_back(std::move(ids));
    ref.pieces.push_back(std::move(pieces));
  }
  return ref;
}

// The pre-tokenizer pieces of `text` outside its added tokens.
std::vector<std::string> atoll_pieces(const HfBpeTokenizer& tok, const Variant& v,
                                      const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  auto flush = [&](size_t end) {
    for (std::string_view p :
         split_pretokens(std::string_view(text).substr(begin, end - begin), v.pattern))
      out.emplace_back(p);
  };
  for (size_t i = 0; i < text.size();) {
    size_t hit = 0;
    for (const std::string& a : v.added)
      if (text.compare(i, a.size(), a) == 0 && tok.added_token_id(a) >= 0)
        hit = std::max(hit, a.size());
    if (hit == 0) {
      ++i;
      continue;
    }
    flush(i);
    i += hit;
    begin = i;
  }
  flush(text.size());
  return out;
}

void expect_matches_reference(const Variant& v, const std::string& tag) {
  const std::string spec = make_tokenizer_json(v);
  auto tok = HfBpeTokenizer::from_json(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->split_pattern(), v.pattern);
  const std::vector<std::string> texts = varied_texts();
  const Reference ref = run_reference(spec, texts, tag);
  ASSERT_EQ(ref.ids.size(), texts.size());
  int64_t compared = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    // The NFC variant's pieces are of the normalized text; compare them where NFC is a no-op.
    if (!v.nfc || texts[i].find("\u0301") == std::string::npos) {
      EXPECT_EQ(atoll_pieces(*tok, v, texts[i]), ref.pieces[i])
          << tag << " text " << i << ": " << texts[i];
    }
    EXPECT_EQ(tok->encode(texts[i]), ref.ids[i]) << tag << " text " << i << ": " << texts[i];
    compared += static_cast<int64_t>(ref.ids[i].size());
  }
  EXPECT_GT(compared, 3000);
  // The reference saw the special tokens as single ids.
  bool saw_special = false;
  for (const auto& ids : ref.ids)
    for (int32_t id : ids) saw_special |= id == tok->added_token_id(v.added[0]);
  EXPECT_TRUE(saw_special);
}

TEST(HfTokenizer, Gpt2PatternMatchesTheReference) {
  expect_matches_reference(kGpt2, "gpt2");
}
TEST(HfTokenizer, Llama3PatternWithIgnoreMergesMatchesTheReference) {
  expect_matches_reference(kLlama3, "llama3");
}
TEST(HfTokenizer, Qwen2PatternWithNfcMatchesTheReference) {
  expect_matches_reference(kQwen2, "qwen2");
}

// Merges a+b (rank 0), b+c (1), a+bc (2): merging "abc" gives [ab, c] (ab+c is no merge), but
// with ignore_merges a piece that is in the vocabulary, "abc", is that one token. Both
// implementations agree on both settings.
TEST(HfTokenizer, IgnoreMergesTakesAWholePieceFromTheVocabulary) {
  auto bpe = BpeTokenizer::from_merges({{'a', 'b'}, {'b', 'c'}, {'a', 257}});
  ASSERT_TRUE(bpe.ok());
  const std::vector<std::string> texts = {"abc\nabc", "xabc abc", "abcabc"};
  for (bool ignore : {false, true}) {
    Variant v = kLlama3;
    v.ignore_merges = ignore;
    const std::string spec = make_tokenizer_json(v, *bpe);
    auto tok = HfBpeTokenizer::from_json(spec);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const Reference ref = run_reference(spec, texts, ignore ? "ignore" : "merge");
    ASSERT_EQ(ref.ids.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tok->encode(texts[i]), ref.ids[i]) << i;
    const std::vector<int32_t> ids = tok->encode("abc");
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(tok->decode(std::vector<int32_t>{id}));
    const std::vector<std::string> expect =
        ignore ? std::vector<std::string>{"abc"} : std::vector<std::string>{"ab", "c"};
    EXPECT_EQ(pieces, expect);
  }
}

TEST(HfTokenizer, DecodeOfEncodeIsAllOfBrownForEveryPattern) {
  const std::string& brown = all_brown_text();
  ASSERT_GT(brown.size(), 5'000'000u);
  for (const Variant& v : {kGpt2, kLlama3, kQwen2}) {
    auto tok = HfBpeTokenizer::from_json(make_tokenizer_json(v));
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const std::vector<int32_t> ids = tok->encode(brown);
    EXPECT_LT(ids.size(), brown.size() / 2) << split_pattern_name(v.pattern);  // merges apply
    EXPECT_TRUE(tok->decode(ids) == brown) << split_pattern_name(v.pattern);
    int64_t bytes = 0;
    for (int32_t id : ids) bytes += tok->token_bytes(id);
    EXPECT_EQ(bytes, static_cast<int64_t>(brown.size()));
  }
}

TEST(HfTokenizer, InvalidUtf8RoundTripsWithoutANormalizer) {
  auto tok = HfBpeTokenizer::from_json(make_tokenizer_json(kLlama3));
  ASSERT_TRUE(tok.ok());
  const std::string bad = "ok \xFF\xFE caf\xC3 \xE2\x82 \xED\xA0\x80 end's";
  EXPECT_EQ(tok->decode(tok->encode(bad)), bad);
  EXPECT_EQ(tok->decode(std::vector<int32_t>{-1, tok->vocab_size()}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(HfTokenizer, ByteLevelAlphabetIsGpt2s) {
  const auto& a = byte_level_alphabet();
  std::set<std::string> distinct(a.begin(), a.end());
  EXPECT_EQ(distinct.size(), 256u);
  EXPECT_EQ(a['A'], "A");
  EXPECT_EQ(a[' '], "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(a['\n'], "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(a[0], "\xC4\x80");     // U+0100
  EXPECT_EQ(a[0xAD], "\xC5\x83");  // U+0143, the last one
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(*byte_level_to_bytes(bytes_to_byte_level(all)), all);
  EXPECT_FALSE(byte_level_to_bytes("a\xE2\x82\xAC").ok());  // '€' is not in the table
}

TEST(HfTokenizer, UnsupportedFilesAreOneClearLine) {
  json::value base = json::parse(make_tokenizer_json(kLlama3));
  auto refused = [](const json::value& v) {
    auto t = load_hf_tokenizer(json::serialize(v));
    EXPECT_FALSE(t.ok());
    const std::string m = t.ok() ? "" : t.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  };
  json::value v = base;
  v.at("model").as_object()["type"] = "WordPiece";
  EXPECT_NE(refused(v).find("model type 'WordPiece'"), std::string::npos);
  v = base;
  v.at("pre_tokenizer").at("pretokenizers").as_array()[0].at("pattern").as_object()["Regex"] =
      "\\w+|\\s+";
  EXPECT_NE(refused(v).find("unsupported pre-tokenizer split pattern '\\w+|\\s+'"),
            std::string::npos);
  v = base;
  v.as_object()["normalizer"] = json::object{{"type", "Lowercase"}};
  EXPECT_NE(refused(v).find("normalizer 'Lowercase'"), std::string::npos);
  v = base;
  v.as_object()["pre_tokenizer"] = json::object{{"type", "Whitespace"}};
  EXPECT_NE(refused(v).find("pre_tokenizer 'Whitespace'"), std::string::npos);
  v = base;
  v.at("model").as_object()["byte_fallback"] = true;
  EXPECT_NE(refused(v).find("byte_fallback"), std::string::npos);
  v = base;
  v.at("model").at("merges").as_array()[0] = "onlyone";
  EXPECT_NE(refused(v).find("merge 0"), std::string::npos);
  v = base;
  v.at("added_tokens").as_array()[0].as_object()["lstrip"] = true;
  EXPECT_NE(refused(v).find("lstrip"), std::string::npos);
  EXPECT_NE(refused(json::value("not an object")).find("top level"), std::string::npos);
  EXPECT_FALSE(load_hf_tokenizer("{\"model\": ").ok());
  EXPECT_TRUE(load_hf_tokenizer(json::serialize(base)).ok());
}

TEST(HfTokenizer, PatternsCutKnownTextAsTheRegexesDo) {
  using P = std::vector<std::string_view>;
  EXPECT_EQ(split_pretokens("Hello world's  end 2024", SplitPattern::kGpt2),
            (P{"Hello", " world", "'s", " ", " end", " 2024"}));
  EXPECT_EQ(split_pretokens("I'M 12345 (x)\n\n y", SplitPattern::kLlama3),
            (P{"I", "'M", " ", "123", "45", " (", "x", ")\n\n", " y"}));
  EXPECT_EQ(split_pretokens("I'M 12345", SplitPattern::kQwen2),
            (P{"I", "'M", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split_pretokens("a \n\n  b", SplitPattern::kLlama3), (P{"a", " \n\n", " ", " b"}));
}

}  // namespace
}  // namespace atl::algorithms::data
