// Brown corpus: tag stripping and detokenization, loading, genres, the train/validation split.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "algorithms/data/brown.h"
#include "algorithms/data/dataset.h"
#include "data_test_util.h"

namespace atl::algorithms::data {
namespace {

using testing::all_brown;

TEST(DataBrown, StripsTagsAndRestoresQuotesAndPunctuation) {
  EXPECT_EQ(brown_to_text("\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at "
                          "evidence/nn ''/'' ./.\n"),
            "The Fulton County said \"no evidence\".");
  EXPECT_EQ(brown_to_text("\tIt/pps is/bez ,/, he/pps said/vbd ;/. ``/`` why/wrb ?/. ''/'' "
                          "Yes/rb !/. \n"),
            "It is, he said; \"why?\" Yes!");
  EXPECT_EQ(brown_to_text("a/at note/nn (/( see/vb p./nn 5/cd )/) :/: done/vbn ./."),
            "a note (see p. 5): done.");
  EXPECT_EQ(brown_to_text("the/at '/' pro/nn '/' letters/nns than/cs '/' con/nn '/' "),
            "the 'pro' letters than 'con'");
  EXPECT_EQ(brown_to_text("about/rb 1/2/cd inch/nn"), "about 1/2 inch");  // tag after LAST '/'
  EXPECT_EQ(brown_to_text("I/ppss do/do n't/* know/vb John/np 's/$ hat/nn"),
            "I don't know John's hat");
  EXPECT_EQ(brown_to_text("cost/nn $/$ 5/cd --/-- more/ap ...../."), "cost $5 -- more.....");
  EXPECT_EQ(brown_to_text("untagged words/nns"), "untagged words");
  // Doubled sentence-final punctuation (a corpus artifact) is written once; distinct marks stay.
  EXPECT_EQ(brown_to_text("Why/wrb ?/. ?/. Go/vb !/. !/. so/rb ;/. ;/. now/rb ?/. !/. ,/, ,/,"),
            "Why? Go! so; now?!,,");
  EXPECT_EQ(brown_to_text(""), "");
  EXPECT_EQ(brown_to_text("\n \n\t\n"), "");
}

TEST(DataBrown, ParagraphsSentencesAndHeadlines) {
  // Sentences of a paragraph are joined with a space; blank lines separate paragraphs.
  EXPECT_EQ(brown_to_text("\n\n\tA/at b/nn ./.\nC/np d/nn ./.\n\n\n\tNew/jj para/nn ?/.\n"),
            "A b. C d.\n\nNew para?");
  // A headline line (mostly -hl tags) stands alone, even inside a block.
  EXPECT_EQ(brown_to_text("\n\nHelp/nn-hl when/wrb-hl needed/vbn-hl \nIf/cs the/at Republic/nn-tl "
                          "wins/vbz ./.\nIt/pps is/bez calm/jj ./.\n"),
            "Help when needed\n\nIf the Republic wins. It is calm.");
  // A quote left open does not leak into the next paragraph.
  EXPECT_EQ(brown_to_text("\tHe/pps said/vbd '/' no/rb \n\n\t'/' yes/rb '/' ./."),
            "He said 'no\n\n'yes'.");
}

TEST(DataBrown, GenresAndNames) {
  auto genres = brown_genres();
  ASSERT_EQ(genres.size(), 15u);
  int total = 0;
  std::string letters;
  for (const BrownGenre& g : genres) {
    total += g.documents;
    letters.push_back(g.letter);
  }
  EXPECT_EQ(total, 500);
  EXPECT_EQ(letters, "abcdefghjklmnpr");
  EXPECT_STREQ(find_brown_genre('g')->name, "belles_lettres");
  EXPECT_EQ(find_brown_genre('i'), nullptr);
  EXPECT_TRUE(is_brown_document_name("ca01"));
  EXPECT_TRUE(is_brown_document_name("ca44"));
  EXPECT_FALSE(is_brown_document_name("ca45"));
  EXPECT_FALSE(is_brown_document_name("ca00"));
  EXPECT_FALSE(is_brown_document_name("ci01"));
  EXPECT_FALSE(is_brown_document_name("CONTENTS"));
}

TEST(DataBrown, AllDocumentsLoadWithGenres) {
  const auto& docs = all_brown();
  ASSERT_EQ(docs.size(), 500u);
  std::map<std::string, int> per_genre;
  size_t bytes = 0;
  for (const Document& d : docs) {
    ++per_genre[d.genre];
    ASSERT_TRUE(is_brown_document_name(d.name)) << d.name;
    EXPECT_EQ(d.genre, std::string(1, d.name[1]));
    EXPECT_EQ(d.genre_name, find_brown_genre(d.genre[0])->name);
    EXPECT_GT(d.text.size(), 5000u) << d.name;
    // Tags are gone: no "/at" after a word, no `` quotes, no leading/trailing whitespace.
    EXPECT_EQ(d.text.find("/at "), std::string::npos) << d.name;
    EXPECT_EQ(d.text.find("``"), std::string::npos) << d.name;
    EXPECT_EQ(d.text.find(";;"), std::string::npos) << d.name;
    EXPECT_NE(d.text.front(), ' ');
    EXPECT_NE(d.text.back(), '\n');
    bytes += d.text.size();
  }
  EXPECT_EQ(per_genre.size(), 15u);
  for (const BrownGenre& g : brown_genres())
    EXPECT_EQ(per_genre[std::string(1, g.letter)], g.documents) << g.letter;
  EXPECT_GT(bytes, 5'000'000u);
  EXPECT_LT(bytes, 7'000'000u);
  EXPECT_TRUE(docs[0].text.starts_with(
      "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
      "election produced \"no evidence\" that any irregularities took place."))
      << docs[0].text.substr(0, 200);
}

TEST(DataBrown, ValidationSplitIsDeterministicAndCoversEveryGenre) {
  const auto& docs = all_brown();
  ASSERT_EQ(docs.size(), 500u);
  std::map<std::string, int> val_per_genre;
  std::set<std::string> val_names;
  for (const Document& d : docs) {
    if (is_validation(d)) {
      ++val_per_genre[d.genre];
      val_names.insert(d.name);
    }
    // A pure function of the name: text and genre fields do not matter.
    Document bare{d.name, "", "", ""};
    EXPECT_EQ(is_validation(bare), is_validation(d));
  }
  EXPECT_EQ(val_names.size(), 52u);
  for (const BrownGenre& g : brown_genres()) {
    int k = std::max(1, (g.documents + 5) / 10);
    EXPECT_EQ(val_per_genre[std::string(1, g.letter)], k) << g.letter;
  }
  // split_documents agrees and keeps order.
  DocumentSplit split = split_documents(docs);
  EXPECT_EQ(split.validation.size(), 52u);
  EXPECT_EQ(split.train.size(), 448u);
  for (size_t i = 1; i < split.train.size(); ++i)
    EXPECT_LT(split.train[i - 1].name, split.train[i].name);
  // Non-Brown documents: about 10% by hash.
  int val = 0;
  for (int i = 0; i < 2000; ++i)
    val += is_validation(Document{"file" + std::to_string(i) + ".txt", "", "text", ""});
  EXPECT_GT(val, 140);
  EXPECT_LT(val, 260);
}

}  // namespace
}  // namespace atl::algorithms::data
