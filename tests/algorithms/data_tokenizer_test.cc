// Tokenizers: lossless round trips (all of Brown, random bytes), BPE training determinism and
// agreement with a naive reference, compression, serialization and rejection of corrupt files.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "algorithms/data/tokenizer.h"
#include "data_test_util.h"
#include "kernels/core/philox.h"
#include "kernels/core/sha256.h"

namespace atl::algorithms::data {
namespace {

using testing::all_brown_text;
using testing::brown_bpe_1024;

std::string random_bytes(uint64_t seed, size_t n) {
  Philox rng(seed, 0);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng.u32(i) & 0xff);
  return s;
}

// Bytes biased towards text-like content (spaces, letters, quotes, newlines, UTF-8 lead bytes).
std::string random_textish(uint64_t seed, size_t n) {
  static constexpr std::string_view kAlphabet = "  aaeeiot'sS\n\t.,-0129\xC3\xA9\x80\xFF\"";
  Philox rng(seed, 1);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = kAlphabet[rng.below(i, kAlphabet.size())];
  return s;
}

TEST(DataTokenizer, SplitChunksFollowsTheRules) {
  std::vector<std::string_view> expect = {"Hello", " world", ",",   " it", "'s", " 2024",
                                          "!",     "\n\n ",  " ok", "\n",  "x",  "  "};
  EXPECT_EQ(split_chunks("Hello world, it's 2024!\n\n  ok\nx  "), expect);
  // As in GPT-2, a punctuation run swallows a following apostrophe: " ...'" then "ll".
  expect = {"caf\xC3\xA9", " na\xC3\xAFve", " ...'", "ll", "'", "x", "'ll"};
  EXPECT_EQ(split_chunks("caf\xC3\xA9 na\xC3\xAFve ...'ll'x'll"), expect);
  EXPECT_TRUE(split_chunks("").empty());
  // Long runs are cut at kMaxChunkBytes.
  auto dashes = split_chunks(std::string(150, '-'));
  ASSERT_EQ(dashes.size(), 3u);
  EXPECT_EQ(dashes[0].size(), kMaxChunkBytes);
  EXPECT_EQ(dashes[2].size(), 150 - 2 * kMaxChunkBytes);
}

TEST(DataTokenizer, SplitChunksConcatenatesBackToInput) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::string s = seed % 2 ? random_bytes(seed, 3000) : random_textish(seed, 3000);
    std::string joined;
    for (std::string_view c : split_chunks(s)) {
      ASSERT_FALSE(c.empty());
      ASSERT_LE(c.size(), kMaxChunkBytes);
      joined.append(c);
    }
    EXPECT_EQ(joined, s);
  }
}

TEST(DataTokenizer, ByteTokenizerRoundTripsAllOfBrownAndRandomBytes) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  const std::string& text = all_brown_text();
  std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);
  std::string bytes = random_bytes(7, 10000);
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  std::vector<int32_t> bad = {65, 256, -1, 66};
  EXPECT_EQ(tok.decode(bad),
            "A\xEF\xBF\xBD\xEF\xBF\xBD"
            "B");
}

TEST(DataTokenizer, BpeTrainingTiesGoToLowestPairAndStopsWhenPairsRunOut) {
  // Chunks "ab", " cd", " ab", " cd": (a,b), (' ',c), (c,d) each occur twice.
  std::vector<std::string_view> texts = {"ab cd ab cd"};
  auto tok = BpeTokenizer::train(texts, 300);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::vector<BpeMerge> expect = {{' ', 'c'}, {'a', 'b'}, {256, 'd'}};
  EXPECT_EQ(tok->merges(), expect);
  EXPECT_EQ(tok->vocab_size(), 259);  // stopped early: only pairs seen once remain
  EXPECT_EQ(tok->piece(258), " cd");
  std::vector<int32_t> ids = tok->encode("ab cd");
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 258}));
  // Overlapping pairs merge left to right: "aaa" -> (aa) a.
  auto t2 = BpeTokenizer::train(std::vector<std::string_view>{"aaa aaa"}, 257);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->merges(), (std::vector<BpeMerge>{{'a', 'a'}}));
  EXPECT_EQ(t2->encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_FALSE(BpeTokenizer::train(texts, 255).ok());
  EXPECT_FALSE(BpeTokenizer::train(texts, BpeTokenizer::kMaxVocab + 1).ok());
}

// Naive reference: recount every pair from scratch at every step.
std::vector<BpeMerge> naive_train(const std::vector<std::string_view>& texts, int vocab) {
  std::map<std::string_view, int64_t> counts;
  for (auto t : texts)
    for (auto c : split_chunks(t)) ++counts[c];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (auto& [c, n] : counts) {
    std::vector<int32_t> ids;
    for (unsigned char ch : c) ids.push_back(ch);
    words.emplace_back(ids, n);
  }
  std::vector<BpeMerge> merges;
  while (256 + static_cast<int>(merges.size()) < vocab) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pc;
    for (auto& [ids, n] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pc[{ids[i], ids[i + 1]}] += n;
    std::pair<int32_t, int32_t> best{};
    int64_t best_n = 0;
    for (auto& [p, n] : pc)
      if (n > best_n) best = p, best_n = n;  // map order: the lowest pair wins ties
    if (best_n < 2) break;
    int32_t c = 256 + static_cast<int32_t>(merges.size());
    merges.push_back({best.first, best.second});
    for (auto& [ids, n] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size();) {
        if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
          out.push_back(c);
          i += 2;
        } else {
          out.push_back(ids[i++]);
        }
      }
      ids = out;
    }
  }
  return merges;
}

TEST(DataTokenizer, BpeIncrementalTrainingMatchesNaiveReference) {
  const auto& docs = testing::all_brown();
  ASSERT_GE(docs.size(), 500u);
  const std::string noise = random_textish(3, 4000);
  std::vector<std::string_view> texts = {std::string_view(docs[3].text).substr(0, 6000),
                                         std::string_view(docs[250].text).substr(0, 6000), noise};
  auto tok = BpeTokenizer::train(texts, 420);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->merges(), naive_train(texts, 420));
  EXPECT_EQ(tok->vocab_size(), 420);
}

// Reference encoder: apply every merge, in learned order, to each chunk.
std::vector<int32_t> naive_encode(const BpeTokenizer& tok, std::string_view text) {
  std::vector<int32_t> out;
  for (std::string_view chunk : split_chunks(text)) {
    std::vector<int32_t> ids(chunk.begin(), chunk.end());
    for (auto& id : ids) id &= 0xff;
    for (size_t m = 0; m < tok.merges().size(); ++m) {
      const BpeMerge& mg = tok.merges()[m];
      std::vector<int32_t> next;
      for (size_t i = 0; i < ids.size();) {
        if (i + 1 < ids.size() && ids[i] == mg.left && ids[i + 1] == mg.right) {
          next.push_back(256 + static_cast<int32_t>(m));
          i += 2;
        } else {
          next.push_back(ids[i++]);
        }
      }
      ids.swap(next);
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

TEST(DataTokenizer, BpeEncodeMatchesApplyingMergesInOrder) {
  const BpeTokenizer& tok = brown_bpe_1024();
  std::string_view text = std::string_view(all_brown_text()).substr(2'000'000, 20'000);
  EXPECT_EQ(tok.encode(text), naive_encode(tok, text));
  std::string noise = random_textish(11, 3000);
  EXPECT_EQ(tok.encode(noise), naive_encode(tok, noise));
}

TEST(DataTokenizer, BpeRoundTripsAllOfBrownAndCompressesIt) {
  const BpeTokenizer& tok = brown_bpe_1024();
  ASSERT_EQ(tok.vocab_size(), 1024);
  EXPECT_EQ(tok.name(), "bpe-1024");
  const std::string& text = all_brown_text();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text);
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(tok.decode(ids), text);
  double bytes_per_token = static_cast<double>(text.size()) / static_cast<double>(ids.size());
  EXPECT_GT(bytes_per_token, 2.0);
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 1024);
  int64_t bytes = 0;
  for (int32_t id : ids) bytes += tok.token_bytes(id);
  EXPECT_EQ(bytes, static_cast<int64_t>(text.size()));
  std::printf(
      "[ info ] bpe-1024 on Brown: %zu bytes -> %zu tokens (%.2f bytes/token), encode %.0f ms\n",
      text.size(), ids.size(), bytes_per_token,
      std::chrono::duration<double, std::milli>(t1 - t0).count());
  // encode_many (shared cache) agrees with encode, document by document.
  const auto& docs = testing::all_brown();
  std::vector<std::string_view> some = {docs[0].text, docs[100].text, docs[499].text};
  auto many = tok.encode_many(some);
  for (size_t i = 0; i < some.size(); ++i) EXPECT_EQ(many[i], tok.encode(some[i]));
}

TEST(DataTokenizer, BpeRoundTripsRandomBytesAndInvalidUtf8) {
  const BpeTokenizer& tok = brown_bpe_1024();
  for (uint64_t seed = 0; seed < 10; ++seed) {
    std::string s = random_bytes(seed, 5000);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
    s = random_textish(seed, 5000);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
  for (std::string s : {std::string(), std::string("\xFF\xFE\xC3"), std::string(1, '\0'),
                        std::string("a\0b\x80 the\xE2\x82", 9), std::string(1000, ' ')})
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{'h', 1024, 'i'}), "h\xEF\xBF\xBDi");
}

TEST(DataTokenizer, BpeTrainingIsDeterministic) {
  std::vector<std::string_view> texts = testing::bpe_training_texts();
  std::vector<std::string_view> part(texts.begin(), texts.begin() + 6);
  auto a = BpeTokenizer::train(part, 600);
  auto b = BpeTokenizer::train(part, 600);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->merges(), b->merges());
  EXPECT_EQ(a->serialize(), b->serialize());
}

TEST(DataTokenizer, BpeSerializeRoundTrip) {
  const BpeTokenizer& tok = brown_bpe_1024();
  std::string s = tok.serialize();
  EXPECT_TRUE(s.starts_with("atoll-bpe 1\npretokenizer atoll-chunks-1\nmerges 768\n"));
  auto back = BpeTokenizer::deserialize(s);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->merges(), tok.merges());
  EXPECT_EQ(back->serialize(), s);
  std::string_view text = std::string_view(all_brown_text()).substr(0, 50'000);
  EXPECT_EQ(back->encode(text), tok.encode(text));
}

// A file with a correct checksum over an arbitrary body, to test the checks behind it.
std::string with_checksum(const std::string& body) {
  return body + "sha256 " + sha256_hex(body.data(), body.size()) + "\n";
}

void expect_rejected(const std::string& data, const std::string& needle) {
  auto r = BpeTokenizer::deserialize(data);
  ASSERT_FALSE(r.ok()) << "accepted: " << data.substr(0, 80);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
}

TEST(DataTokenizer, BpeDeserializeRejectsCorruptInput) {
  const std::string good = brown_bpe_1024().serialize();
  const std::string head = "atoll-bpe 1\npretokenizer atoll-chunks-1\n";
  expect_rejected("", "expected 'atoll-bpe 1'");
  expect_rejected("{\"model\": {}}\n", "not an Atoll BPE tokenizer");
  expect_rejected("atoll-bpe 1\npretokenizer other\n", "incompatible");
  expect_rejected(good.substr(0, good.size() / 2), "file ends after");
  expect_rejected(good.substr(0, good.rfind("sha256")), "expected 'sha256");
  expect_rejected(good + "extra\n", "unexpected data");
  std::string flipped = good;  // change one merge id: the checksum catches it
  size_t pos = flipped.find("\n", head.size() + 12) + 1;
  flipped[pos] = flipped[pos] == '1' ? '2' : '1';
  auto r = BpeTokenizer::deserialize(flipped);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == StatusCode::kDataLoss ||
              r.status().message().find("merge") != std::string::npos)
      << r.status().to_string();
  expect_rejected(with_checksum(head + "merges x\n"), "expected 'merges <count>'");
  expect_rejected(with_checksum(head + "merges -1\n"), "expected 'merges <count>'");
  expect_rejected(with_checksum(head + "merges 99999999\n"), "exceeds the limit");
  expect_rejected(with_checksum(head + "merges 1\n97\n"), "expected '<left id> <right id>'");
  expect_rejected(with_checksum(head + "merges 1\n97 98 99\n"), "expected '<left id> <right id>'");
  expect_rejected(with_checksum(head + "merges 2\n97 98\n256 257\n"), "not defined before it");
  expect_rejected(with_checksum(head + "merges 2\n97 98\n-1 98\n"), "not defined before it");
  expect_rejected(with_checksum(head + "merges 2\n97 98\n97 98\n"), "repeats merge 0");
  // A valid hand-written file is accepted.
  auto ok = BpeTokenizer::deserialize(with_checksum(head + "merges 2\n116 104\n256 101\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->piece(257), "the");
  EXPECT_EQ(ok->encode("the"), (std::vector<int32_t>{257}));
}

}  // namespace
}  // namespace atl::algorithms::data
