// A site's data, ready to train on: documents from a data spec, split into train and
// validation by document, tokenized into flat token datasets.
#pragma once

#include <memory>
#include <string>

#include "algorithms/data/dataset.h"
#include "algorithms/data/tokenizer.h"
#include "kernels/core/status.h"
#include "node/data_source.h"

namespace atl::node {

// "bytes" (vocab 256) or "bpe:N" (byte-level BPE with vocabulary N, trained on the site's
// training documents; deterministic) or "bpe-file:PATH" (a saved BPE).
struct TokenizerChoice {
  std::string kind = "bytes";
  int32_t bpe_vocab = 0;
  std::string path;
  std::string blob;  // kind "blob": a serialized tokenizer restored from a checkpoint
  std::string to_string() const;
};
StatusOr<TokenizerChoice> parse_tokenizer_choice(const std::string& text);

struct SiteData {
  std::unique_ptr<algorithms::data::Tokenizer> tokenizer;
  std::string tokenizer_blob;  // serialized BPE (empty for bytes), saved with checkpoints
  algorithms::data::TokenDataset train, validation;
  int64_t train_documents = 0, validation_documents = 0;
};

// Loads, splits and tokenizes. Pre-tokenized data (tokens:PATH) has no documents: the last
// 5% of its tokens are the validation set.
StatusOr<SiteData> load_site_data(const DataSpec& spec, const TokenizerChoice& tokenizer,
                                  const std::string& brown_dir);

// Same, with a tokenizer restored from a checkpoint (blob as tokenizer_from_blob takes it).
StatusOr<SiteData> load_site_data_with_blob(const DataSpec& spec, const std::string& blob,
                                            const std::string& brown_dir);

// Rebuilds a tokenizer saved with a checkpoint ("" = bytes).
StatusOr<std::unique_ptr<algorithms::data::Tokenizer>> tokenizer_from_blob(
    const std::string& blob);

}  // namespace atl::node
