// Data specs and loading from disk: Brown, text files and directories, token files.
#include "node/data_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "kernels/core/file_io.h"
#include "node/site_data.h"
#include "tools/temp_dir.h"

namespace atl::node {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Writes `data` to `name` inside `dir`.
void write_in(const testing::TempDir& dir, const std::string& name, const std::string& data) {
  std::ofstream(dir.sub(name), std::ios::binary) << data;
}

TEST(DataSource, ParsesGoodSpecs) {
  auto s = parse_data_spec("brown");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, DataSpec::Kind::kBrown);
  EXPECT_EQ(s->genres, "");
  s = parse_data_spec("brown:f,a,b");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->genres, "abf");
  EXPECT_EQ(s->to_string(), "brown:a,b,f");
  EXPECT_EQ(*parse_data_spec(s->to_string()), *s);
  s = parse_data_spec("text:corpus/my books");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, DataSpec::Kind::kText);
  EXPECT_EQ(s->path, "corpus/my books");
  EXPECT_EQ(s->to_string(), "text:corpus/my books");
  s = parse_data_spec("tokens:shards/train.u16");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, DataSpec::Kind::kTokens);
  EXPECT_TRUE(parse_data_spec("tokens:x.i32").ok());
  EXPECT_TRUE(parse_data_spec("text:a:b.txt").ok());  // only the first ':' separates
}

TEST(DataSource, RejectsBadSpecsWithOneClearLine) {
  struct Case {
    const char* spec;
    const char* needle;
  };
  for (const Case& c :
       {Case{"", "expected 'brown'"}, Case{"brwn", "expected 'brown'"},
        Case{"Brown", "expected 'brown'"}, Case{"brown:", "no genres"},
        Case{"brown:z", "'z' is not a Brown genre letter"},
        Case{"brown:a,,b", "'' is not a Brown genre"},
        Case{"brown:ab", "'ab' is not a Brown genre"}, Case{"brown:a,i", "'i' is not"},
        Case{"brown:a,a", "listed twice"}, Case{"text:", "missing path"},
        Case{"text", "missing path"}, Case{"tokens:", "missing path"},
        Case{"tokens:train.bin", "must end in .u16"}}) {
    auto r = parse_data_spec(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.spec << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find(std::string("'") + c.spec + "'"), std::string::npos)
        << "names the spec: " << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

TEST(DataSource, LoadsSelectedBrownGenres) {
  auto docs = load_documents(*parse_data_spec("brown:m,r"), algorithms::data::testing::brown_dir());
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 15u);  // 6 science fiction + 9 humor
  EXPECT_EQ((*docs)[0].name, "cm01");
  EXPECT_EQ((*docs)[0].genre_name, "science_fiction");
  EXPECT_EQ((*docs)[14].name, "cr09");
  EXPECT_EQ((*docs)[14].genre, "r");
}

TEST(DataSource, MissingBrownCorpusSaysHowToFixIt) {
  TempDir dir;
  auto r = load_documents(DataSpec{}, dir.sub("nowhere"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "Brown corpus not found at " + dir.sub("nowhere") + ": run deploy/install-deps.sh");
  // A directory without the files.
  write_in(dir, "ca01", "The/at end/nn ./.\n");
  r = load_documents(*parse_data_spec("brown:a"), dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing ca02"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("deploy/install-deps.sh"), std::string::npos);
}

TEST(DataSource, LoadsTextFilesAndDirectories) {
  TempDir dir;
  write_in(dir, "b.txt", "second file\n");
  write_in(dir, "a.txt", "first file \xC3\xA9\n");
  write_in(dir, "notes.md", "ignored");
  fs::create_directories(dir.sub("sub.txt"));  // a directory named *.txt is not a file
  auto docs = load_documents(*parse_data_spec("text:" + dir.path()));
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].name, "a.txt");
  EXPECT_EQ((*docs)[0].text, "first file \xC3\xA9\n");
  EXPECT_EQ((*docs)[0].genre, "");
  EXPECT_EQ((*docs)[0].genre_name, "text");
  EXPECT_EQ((*docs)[1].name, "b.txt");
  auto one = load_documents(*parse_data_spec("text:" + dir.sub("notes.md")));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].text, "ignored");
  auto missing = load_documents(*parse_data_spec("text:" + dir.sub("nope")));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);
  TempDir empty;
  auto none = load_documents(*parse_data_spec("text:" + empty.path()));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no *.txt files"), std::string::npos);
  EXPECT_FALSE(load_documents(*parse_data_spec("tokens:x.u16")).ok());
}

// A *.txt symbolic link to itself or to nothing was skipped when the directory listed it before
// a good file, and refused ("cannot list DIR: Too many levels of symbolic links") when it came
// last. Now each is refused by name, whatever the order; links to files are read.
TEST(DataSource, BrokenTextLinksAreRefusedByName) {
  TempDir dir;
  write_in(dir, "b.txt", "a real file\n");
  fs::create_symlink("b.txt", dir.sub("a-link.txt"));
  auto linked = load_documents(*parse_data_spec("text:" + dir.path()));
  ASSERT_TRUE(linked.ok()) << linked.status().to_string();
  ASSERT_EQ(linked->size(), 2u);
  EXPECT_EQ((*linked)[0].name, "a-link.txt");
  EXPECT_EQ((*linked)[0].text, "a real file\n");

  const std::string rule = ": text:" + dir.path() +
                           " reads every *.txt file in it; remove the entry, or make it the text "
                           "file it names";
  // Names before and after the good files: the same answer either way.
  for (const std::string& name : {std::string("0-loop.txt"), std::string("z-loop.txt")}) {
    fs::create_symlink(name, dir.sub(name));
    auto r = load_documents(*parse_data_spec("text:" + dir.path()));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              dir.sub(name) + " cannot be followed (Too many levels of symbolic links)" + rule);
    fs::remove(dir.sub(name));
  }
  for (const std::string& name : {std::string("0-gone.txt"), std::string("z-gone.txt")}) {
    fs::create_symlink("deleted.txt", dir.sub(name));
    auto r = load_documents(*parse_data_spec("text:" + dir.path()));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              dir.sub(name) + " is a symbolic link to deleted.txt, which does not exist" + rule);
    fs::remove(dir.sub(name));
  }
  // Both at once: the first by name is the one named.
  fs::create_symlink("deleted.txt", dir.sub("y-gone.txt"));
  fs::create_symlink("x-loop.txt", dir.sub("x-loop.txt"));
  auto both = load_documents(*parse_data_spec("text:" + dir.path()));
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message().rfind(dir.sub("x-loop.txt") + " cannot be followed", 0), 0u)
      << both.status().message();
}

TEST(DataSource, TokenFilesRoundTripAndRejectBadData) {
  TempDir dir;
  std::vector<int32_t> ids = {0, 1, 255, 256, 65535};
  ASSERT_TRUE(write_token_file(dir.sub("t.u16"), ids).ok());
  EXPECT_EQ(fs::file_size(dir.sub("t.u16")), 10u);
  auto back = load_token_file(dir.sub("t.u16"));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, ids);
  // Little-endian on disk, whatever the host.
  EXPECT_EQ(read_file(dir.sub("t.u16"))->substr(6, 2), std::string("\x00\x01", 2));
  ids.push_back(1 << 20);
  EXPECT_FALSE(write_token_file(dir.sub("t.u16"), ids).ok());
  ASSERT_TRUE(write_token_file(dir.sub("t.i32"), ids).ok());
  EXPECT_EQ(*load_token_file(dir.sub("t.i32")), ids);
  write_in(dir, "odd.u16", "abc");
  auto odd = load_token_file(dir.sub("odd.u16"));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kDataLoss);
  write_in(dir, "neg.i32", std::string("\xff\xff\xff\xff", 4));
  EXPECT_FALSE(load_token_file(dir.sub("neg.i32")).ok());
  EXPECT_FALSE(load_token_file(dir.sub("absent.i32")).ok());
  EXPECT_FALSE(load_token_file(dir.sub("t.bin")).ok());
  // An empty file said "vocab_size must be positive" further on.
  write_in(dir, "empty.u16", "");
  EXPECT_EQ(load_token_file(dir.sub("empty.u16")).status().message(),
            "token file " + dir.sub("empty.u16") + " is empty: it holds no tokens to train on");
}

// A site trains on all of its documents unless asked to hold some out; a held-out split keeps
// exactly the documents docs/data.md names; --val-data becomes the validation set.
TEST(SiteData, HoldoutChoosesWhichDocumentsTrain) {
  using algorithms::data::testing::brown_dir;
  auto spec = parse_data_spec("brown:r");  // humor: 9 documents, 1 held out by name
  ASSERT_TRUE(spec.ok());
  auto all = load_site_data(*spec, TokenizerChoice{}, brown_dir(), Holdout::kNone);
  auto held = load_site_data(*spec, TokenizerChoice{}, brown_dir(), Holdout::kHeldOut);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(all->train_documents, 9);
  EXPECT_EQ(all->validation.size(), 0);
  EXPECT_EQ(held->train_documents, 8);
  EXPECT_EQ(held->validation_documents, 1);
  // Every byte of the site is a training token when nothing is held out: the two parts plus
  // the one document separator that now joins them.
  const int64_t separator = static_cast<int64_t>(algorithms::data::kDocumentSeparator.size());
  EXPECT_EQ(all->train.size(), held->train.size() + held->validation.size() + separator);

  SiteDataOptions o;
  o.train_spec = "brown:r";
  o.val_spec = "brown:m";
  o.brown_dir = brown_dir();
  auto with_val = load_site_training_data(o);
  ASSERT_TRUE(with_val.ok()) << with_val.status().to_string();
  EXPECT_EQ(with_val->train.size(), all->train.size());
  auto sf =
      load_site_data(*parse_data_spec("brown:m"), TokenizerChoice{}, brown_dir(), Holdout::kNone);
  ASSERT_TRUE(sf.ok());
  EXPECT_EQ(with_val->validation.size(), sf->train.size());

  o.holdout = Holdout::kHeldOut;  // two validation sets asked for
  auto both = load_site_training_data(o);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("use one"), std::string::npos) << both.status().message();
  EXPECT_FALSE(parse_holdout("some").ok());
  EXPECT_EQ(*parse_holdout("none"), Holdout::kNone);
  EXPECT_EQ(*parse_holdout("held-out"), Holdout::kHeldOut);
}

// A site's own validation is reported in bits per byte: token ids without their tokenizer have
// no byte count, so a site may train on them but not validate with them; text validation of
// such ids cannot be tokenized as they were.
TEST(SiteData, TokenIdsWithoutTheirTokenizerTrainButDoNotValidate) {
  TempDir dir;
  std::vector<int32_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 37 % 500);
  ASSERT_TRUE(write_token_file(dir.sub("t.u16"), ids).ok());
  write_in(dir, "v.txt", "some validation text\n");
  SiteDataOptions o;
  o.train_spec = "tokens:" + dir.sub("t.u16");
  auto trains = load_site_training_data(o);
  ASSERT_TRUE(trains.ok()) << trains.status().to_string();
  EXPECT_FALSE(trains->train.bytes_countable);
  EXPECT_EQ(trains->train.vocab_size, 500);
  o.holdout = Holdout::kHeldOut;
  auto held = load_site_training_data(o);
  ASSERT_FALSE(held.ok());
  EXPECT_NE(
      held.status().message().find("a site's own validation is measured in bits per byte, "
                                   "and token ids without their tokenizer have no byte count"),
      std::string::npos)
      << held.status().message();
  o.holdout = Holdout::kNone;
  o.val_spec = "text:" + dir.sub("v.txt");
  auto text_val = load_site_training_data(o);
  ASSERT_FALSE(text_val.ok());
  EXPECT_NE(text_val.status().message().find("text cannot be tokenized as they were"),
            std::string::npos)
      << text_val.status().message();
  TokenizerChoice bpe;
  bpe.kind = "bpe";
  bpe.bpe_vocab = 300;
  auto trained_bpe = load_site_data(*parse_data_spec(o.train_spec), bpe, "", Holdout::kNone);
  ASSERT_FALSE(trained_bpe.ok());
  EXPECT_NE(trained_bpe.status().message().find("cannot train a BPE"), std::string::npos);
}

// Too little text to train a step on is refused before anything else happens.
TEST(SiteData, TooFewTokensToTrainIsOneLine) {
  TempDir dir;
  write_in(dir, "one.txt", "x");
  SiteDataOptions o;
  o.train_spec = "text:" + dir.sub("one.txt");
  auto r = load_site_training_data(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("too few to train on"), std::string::npos)
      << r.status().message();
}

// A lone document is split by position at the first line that starts at or after 90% of it.
TEST(SiteData, LoneDocumentSplitsAtTheLineAfterNinetyPercent) {
  using algorithms::data::Document;
  std::string text;
  for (int i = 0; i < 10; ++i) text += "line " + std::to_string(i) + " xxxx\n";  // 12 bytes each
  auto split = algorithms::data::split_documents({Document{"one.txt", "", "", text}});
  ASSERT_EQ(split.train.size(), 1u);
  ASSERT_EQ(split.validation.size(), 1u);
  EXPECT_EQ(split.validation[0].text, "line 9 xxxx\n");  // 90% of 120 bytes is byte 108
  EXPECT_EQ(split.train[0].text + split.validation[0].text, text);
  EXPECT_EQ(split.validation[0].name, "one.txt[validation]");
  // No line break after 90%: cut at the byte, never inside a UTF-8 character.
  const std::string utf8 = std::string(8, 'a') + "\xc3\xa9";  // 10 bytes, é at [8, 10)
  auto cut = algorithms::data::split_lone_document(Document{"u.txt", "", "", utf8});
  ASSERT_EQ(cut.validation.size(), 1u);
  EXPECT_EQ(cut.validation[0].text, "\xc3\xa9");
  const std::string mid = std::string(9, 'a') + "\xc3\xa9";  // 11 bytes: byte 9 starts é
  auto cut2 = algorithms::data::split_lone_document(Document{"m.txt", "", "", mid});
  ASSERT_EQ(cut2.validation.size(), 1u);
  EXPECT_EQ(cut2.validation[0].text, "\xc3\xa9");
  const std::string inside = std::string(8, 'a') + "\xe2\x82\xac" + "b";  // 12 bytes, € at 8..10
  auto cut3 = algorithms::data::split_lone_document(Document{"e.txt", "", "", inside});
  ASSERT_EQ(cut3.validation.size(), 1u);
  EXPECT_EQ(cut3.validation[0].text,
            "\xe2\x82\xac"
            "b");  // 90% of 12 is byte 10, inside €
}

}  // namespace
}  // namespace atl::node
