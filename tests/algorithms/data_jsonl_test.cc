// Fine-tuning data in JSON Lines: record parsing and its one-line errors, the loss mask from
// the dataset through split_inputs_targets into the model's loss (sum and count) and the bytes
// of bits per byte, and the jsonl data spec end to end through a site's data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "algorithms/data/dataset.h"
#include "algorithms/data/jsonl.h"
#include "algorithms/model/llama.h"
#include "data_test_util.h"
#include "node/data_source.h"
#include "node/evaluate.h"
#include "node/site_data.h"

namespace atl::algorithms::data {
namespace {

// `name` in a directory of this process's own: the file keeps its base name, which names its
// records and so decides the held-out split (a name with the process id in it made that split,
// and the test's expectations, depend on the id).
std::string temp_file(const std::string& name, const std::string& contents) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("atoll-jsonl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path.string();
}

TEST(DataJsonl, RecordsBecomeDocumentsWithTheirPrompts) {
  const std::string text =
      "{\"prompt\": \"Q: 2+2?\\n\", \"response\": \"A: 4\"}\n"
      "\n"
      "  {\"text\": \"plain \\u00e9t\\u00e9\"}  \r\n"
      "{\"response\": \"r\", \"prompt\": \"\"}";
  auto docs = parse_jsonl_records(text, "dir/ft.jsonl");
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0].name, "ft.jsonl:1");
  EXPECT_EQ((*docs)[0].text, "Q: 2+2?\nA: 4");
  EXPECT_EQ((*docs)[0].prompt_bytes, 8u);
  EXPECT_EQ((*docs)[1].name, "ft.jsonl:3");
  EXPECT_EQ((*docs)[1].text, "plain \xC3\xA9t\xC3\xA9");
  EXPECT_EQ((*docs)[1].prompt_bytes, 0u);
  EXPECT_EQ((*docs)[2].name, "ft.jsonl:4");
  EXPECT_EQ((*docs)[2].text, "r");
  EXPECT_EQ((*docs)[2].prompt_bytes, 0u);
}

TEST(DataJsonl, BadRecordsNameTheFileTheLineAndTheProblem) {
  struct Case {
    std::string contents, expect;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", "f.jsonl line 2: not valid JSON"},
      {"[1, 2]", "f.jsonl line 1: a record must be a JSON object, got array"},
      {"{\"text\": 5}", "f.jsonl line 1: \"text\" must be a string, got int64"},
      {"{\"prompt\": \"p\", \"reponse\": \"r\"}", "f.jsonl line 1: unknown key \"reponse\""},
      {"{\"text\": \"t\", \"prompt\": \"p\", \"response\": \"r\"}", "cannot be combined"},
      {"\n\n{\"prompt\": \"p\"}", "f.jsonl line 3: missing \"response\""},
      {"{\"prompt\": \"p\", \"response\": \"\"}", "f.jsonl line 1: \"response\" is empty"},
      {"{\"text\": \"\"}", "f.jsonl line 1: \"text\" is empty"},
      {"{}", "f.jsonl line 1: no \"text\" or \"prompt\"/\"response\""},
      {"\n  \n", "f.jsonl holds no records"},
      {"{\"text\": \"\xFF\"}",
       "f.jsonl line 1: invalid UTF-8 at byte offset 10 of the line (byte 0xFF); save the file "
       "as UTF-8"},
  };
  for (const Case& c : cases) {
    auto r = parse_jsonl_records(c.contents, "f.jsonl");
    ASSERT_FALSE(r.ok()) << c.contents;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// A key given twice was accepted and the parse kept its last value: {"prompt": "a", "prompt":
// "b", ...} trained on b without a word.
TEST(DataJsonl, AKeyGivenTwiceIsRefusedWithItsLine) {
  auto r = parse_jsonl_records(
      "{\"text\": \"ok\"}\n{\"prompt\": \"a\", \"response\": \"r\", \"prompt\": \"b\"}\n",
      "f.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "f.jsonl line 2: key \"prompt\" appears twice; give each key once per record");
  // Also when both copies are equal, and before the value is looked at.
  r = parse_jsonl_records("{\"text\": \"x\", \"text\": \"\"}", "f.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "f.jsonl line 1: key \"text\" appears twice; give each key once per record");
  // Keys inside a value are the value's business: it is refused for not being a string.
  r = parse_jsonl_records("{\"text\": {\"a\": 1, \"a\": 2}}", "f.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "f.jsonl line 1: \"text\" must be a string, got object");
}

// Editors on Windows start a UTF-8 file with a byte order mark, which was a syntax error on line
// 1; anywhere else it is still one.
TEST(DataJsonl, ALeadingByteOrderMarkIsSkipped) {
  auto docs = parse_jsonl_records("\xEF\xBB\xBF{\"text\": \"first\"}\r\n{\"text\": \"second\"}\r\n",
                                  "f.jsonl");
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].name, "f.jsonl:1");
  EXPECT_EQ((*docs)[0].text, "first");
  EXPECT_EQ((*docs)[1].text, "second");
  auto second = parse_jsonl_records("{\"text\": \"a\"}\n\xEF\xBB\xBF{\"text\": \"b\"}", "f.jsonl");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("f.jsonl line 2: not valid JSON"), std::string::npos)
      << second.status().message();
  // A file holding only the mark holds no records.
  EXPECT_EQ(parse_jsonl_records("\xEF\xBB\xBF", "f.jsonl")
                .status()
                .message()
                .rfind("f.jsonl holds no records", 0),
            0u);
}

// Bytes that are not UTF-8 were "not valid JSON (syntax error)", with no word of where.
TEST(DataJsonl, InvalidUtf8IsReportedWithItsLineAndOffset) {
  struct Case {
    std::string contents, message;
  };
  const std::vector<Case> cases = {
      // Latin-1 "é" (0xE9) inside a string: line 2, offset 13 (0-based, from the line's start).
      {"{\"text\": \"a\"}\n{\"text\": \"caf\xE9\"}\n",
       "f.jsonl line 2: invalid UTF-8 at byte offset 13 of the line (byte 0xE9); save the file "
       "as UTF-8"},
      // A truncated 3-byte sequence, then an overlong encoding of '/', and a UTF-16 surrogate.
      {"{\"text\": \"\xE2\x82\"}", "invalid UTF-8 at byte offset 10 of the line (byte 0xE2)"},
      {"{\"text\": \"\xC0\xAF\"}", "invalid UTF-8 at byte offset 10 of the line (byte 0xC0)"},
      {"{\"text\": \"\xED\xA0\x80\"}", "invalid UTF-8 at byte offset 10 of the line (byte 0xED)"},
      // Offsets count from the line's first byte after a byte order mark.
      {"\xEF\xBB\xBF{\"text\": \"\xFF\"}",
       "f.jsonl line 1: invalid UTF-8 at byte offset 10 of the line"},
  };
  for (const Case& c : cases) {
    auto r = parse_jsonl_records(c.contents, "f.jsonl");
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  // Valid multi-byte text is untouched.
  auto ok = parse_jsonl_records("{\"text\": \"caf\xC3\xA9 \xF0\x9F\x99\x82\"}", "f.jsonl");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)[0].text, "caf\xC3\xA9 \xF0\x9F\x99\x82");
}

// Byte tokenizer: one token a byte, so the mask is checkable position by position.
TEST(DataJsonl, PromptTokensAreMaskedAndNeverTargets) {
  std::vector<Document> docs(2);
  docs[0].text = "PPPRR";
  docs[0].prompt_bytes = 3;
  docs[1].text = "TT";
  const TokenDataset ds = build_dataset(docs, ByteTokenizer());
  // P P P R R \n \n T T: the prompt's three tokens are stored masked.
  const std::vector<int32_t> expect = {~'P', ~'P', ~'P', 'R', 'R', '\n', '\n', 'T', 'T'};
  EXPECT_EQ(ds.tokens, expect);
  EXPECT_EQ(ds.bytes, 2 + 2 + 2);  // response, separator, text: the prompt's bytes are not counted
  std::vector<int32_t> inputs, targets;
  split_inputs_targets(ds.tokens.data(), 1, 8, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<int32_t>{'P', 'P', 'P', 'R', 'R', '\n', '\n', 'T'}));
  EXPECT_EQ(targets, (std::vector<int32_t>{-1, -1, 'R', 'R', '\n', '\n', 'T', 'T'}));
  GlobalBatch b;
  b.B = 1;
  b.T = 8;
  b.tokens = ds.tokens;
  EXPECT_EQ(target_bytes(b, ByteTokenizer()), 6);
  // Data without prompts holds no masked token: its batches are what they always were.
  for (int32_t t : build_dataset(testing::all_brown(), ByteTokenizer()).tokens) ASSERT_GE(t, 0);
}

ModelConfig tiny_model() {
  ModelConfig c;
  c.vocab = 256;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  return c;
}

// The mask reaches the loss: masked targets are out of the sum and the count (so out of the
// gradient too: it differs from training on every token), and evaluation counts only the
// unmasked tokens and their bytes.
TEST(DataJsonl, MaskedTargetsAreOutOfTheLossSumCountAndBytes) {
  std::vector<Document> docs(3);
  docs[0].text = "Question one? Answer one.";
  docs[0].prompt_bytes = 14;
  docs[1].text = "Why? Because.";
  docs[1].prompt_bytes = 5;
  docs[2].text = "Q: long prompt here. A: ok";
  docs[2].prompt_bytes = 21;
  const TokenDataset ds = build_dataset(docs, ByteTokenizer());
  const int B = 2, T = 16;
  ASSERT_GE(ds.size(), B * T + 1);
  const ModelConfig cfg = tiny_model();
  Llama model(cfg);
  ParamSet params(model.layout());
  init_params(params, cfg, 7);

  std::vector<int32_t> rows(ds.tokens.begin(), ds.tokens.begin() + B * (T + 1));
  std::copy(ds.tokens.begin() + 20, ds.tokens.begin() + 20 + T + 1, rows.begin() + T + 1);
  std::vector<int32_t> inputs, targets;
  split_inputs_targets(rows.data(), B, T, inputs, targets);
  // Unmasked: every target counts.
  std::vector<int32_t> all_targets(targets.size());
  for (size_t i = 0; i < targets.size(); ++i)
    all_targets[i] = token_id(rows[(i / T) * (T + 1) + i % T + 1]);
  model.forward(params, inputs.data(), all_targets.data(), B, T);
  const std::vector<float> per_position(model.losses(), model.losses() + B * T);
  double sum = 0;
  int64_t count = 0;
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] >= 0) sum += per_position[i], ++count;
  ASSERT_GT(count, 0);
  ASSERT_LT(count, B * T);
  const float masked = model.forward(params, inputs.data(), targets.data(), B, T);
  EXPECT_EQ(model.num_targets(), count);
  EXPECT_FLOAT_EQ(masked, static_cast<float>(sum / static_cast<double>(count)));
  ParamSet grads(model.layout());
  model.backward(params, grads);
  // And it differs from training on every token.
  ParamSet grads_all(model.layout());
  model.forward(params, inputs.data(), all_targets.data(), B, T);
  model.backward(params, grads_all);
  EXPECT_NE(std::vector<float>(grads.data(), grads.data() + grads.numel()),
            std::vector<float>(grads_all.data(), grads_all.data() + grads.numel()));

  // Evaluation: only unmasked targets, and only their bytes.
  const node::Evaluation e = node::evaluate_bpb(model, params, ds, ByteTokenizer(), T, B, 0);
  const auto batches = evaluation_batches(ds, T, 0, B);
  int64_t expect_tokens = 0;
  for (const auto& b : batches)
    for (int r = 0; r < b.B; ++r)
      for (int t = 1; t <= T; ++t) expect_tokens += is_target(b.row(r)[t]);
  EXPECT_EQ(e.tokens, expect_tokens);
  EXPECT_LT(e.tokens, static_cast<int64_t>(batches.size()) * B * T);
  EXPECT_TRUE(std::isfinite(e.bpb));
}

TEST(DataJsonl, JsonlSpecLoadsSplitsAndValidates) {
  std::string train, val;
  for (int i = 0; i < 40; ++i)
    train += "{\"prompt\": \"Say " + std::to_string(i) + ": \", \"response\": \"number " +
             std::to_string(i) + ".\"}\n";
  val = "{\"prompt\": \"Say 7: \", \"response\": \"number 7.\"}\n{\"text\": \"free text\"}\n";
  const std::string train_path = temp_file("train.jsonl", train);
  const std::string val_path = temp_file("val.jsonl", val);
  auto spec = node::parse_data_spec("jsonl:" + train_path);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, node::DataSpec::Kind::kJsonl);
  EXPECT_EQ(spec->to_string(), "jsonl:" + train_path);

  auto site = node::load_site_data(*spec, node::TokenizerChoice{}, testing::brown_dir(),
                                   node::Holdout::kNone);
  ASSERT_TRUE(site.ok()) << site.status().to_string();
  EXPECT_EQ(site->train_documents, 40);
  int64_t masked = 0;
  for (int32_t t : site->train.tokens) masked += !is_target(t);
  int64_t prompt_bytes = 0;
  for (int i = 0; i < 40; ++i) prompt_bytes += 6 + static_cast<int64_t>(std::to_string(i).size());
  EXPECT_EQ(masked, prompt_bytes);

  auto held = node::load_site_data(*spec, node::TokenizerChoice{}, testing::brown_dir(),
                                   node::Holdout::kHeldOut);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(held->train_documents + held->validation_documents, 40);
  EXPECT_GT(held->validation_documents, 0);

  auto val_spec = node::parse_data_spec("jsonl:" + val_path);
  ASSERT_TRUE(val_spec.ok());
  ASSERT_TRUE(node::set_validation_data(*site, *val_spec, testing::brown_dir()).ok());
  EXPECT_EQ(site->validation_documents, 2);
  int64_t val_masked = 0;
  for (int32_t t : site->validation.tokens) val_masked += !is_target(t);
  EXPECT_EQ(val_masked, 7);  // "Say 7: "

  const std::string bad_path = temp_file("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": 1}\n");
  auto bad =
      node::load_site_data(*node::parse_data_spec("jsonl:" + bad_path), node::TokenizerChoice{},
                           testing::brown_dir(), node::Holdout::kNone);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(bad_path + " line 2: \"text\" must be a string"),
            std::string::npos)
      << bad.status().message();
  auto missing = node::load_documents(*node::parse_data_spec("jsonl:/nonexistent/x.jsonl"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/x.jsonl"), std::string::npos);
  EXPECT_FALSE(node::parse_data_spec("jsonl:").ok());
  std::filesystem::remove_all(std::filesystem::path(train_path).parent_path());
}

}  // namespace
}  // namespace atl::algorithms::data
