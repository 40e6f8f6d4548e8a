#include "node/site_data.h"

#include <string_view>
#include <vector>

#include "algorithms/data/hf_tokenizer.h"
#include "kernels/core/file_io.h"

namespace atl::node {

using algorithms::data::BpeTokenizer;
using algorithms::data::ByteTokenizer;
using algorithms::data::Tokenizer;

std::string TokenizerChoice::to_string() const {
  if (kind == "bpe") return "bpe:" + std::to_string(bpe_vocab);
  if (kind == "bpe-file") return "bpe-file:" + path;
  if (kind == "hf") return "hf:" + path;
  return "bytes";
}

StatusOr<TokenizerChoice> parse_tokenizer_choice(const std::string& text) {
  TokenizerChoice c;
  if (text == "bytes") return c;
  if (text.rfind("bpe:", 0) == 0) {
    const std::string n = text.substr(4);
    char* end = nullptr;
    long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0' || v < 257 || v > 65536)
      return InvalidArgument("tokenizer '" + text +
                             "': the BPE vocabulary must be an integer in [257, 65536], e.g. "
                             "bpe:4096");
    c.kind = "bpe";
    c.bpe_vocab = static_cast<int32_t>(v);
    return c;
  }
  if (text.rfind("bpe-file:", 0) == 0 && text.size() > 9) {
    c.kind = "bpe-file";
    c.path = text.substr(9);
    return c;
  }
  if (text.rfind("hf:", 0) == 0 && text.size() > 3) {
    c.kind = "hf";
    c.path = text.substr(3);
    return c;
  }
  return InvalidArgument("unknown tokenizer '" + text +
                         "': use bytes, bpe:VOCAB (e.g. bpe:4096), bpe-file:PATH or "
                         "hf:PATH/tokenizer.json");
}

StatusOr<SiteData> load_site_data_with_blob(const DataSpec& spec, const std::string& blob,
                                            const std::string& brown_dir, Holdout holdout) {
  TokenizerChoice choice;
  choice.kind = blob.empty() ? "bytes" : "blob";
  choice.blob = blob;
  return load_site_data(spec, choice, brown_dir, holdout);
}

StatusOr<SiteData> tokenizer_only_site(const std::string& blob) {
  SiteData site;
  ATOLL_ASSIGN_OR_RETURN(site.tokenizer, tokenizer_from_blob(blob));
  site.tokenizer_blob = blob;
  site.train.vocab_size = site.tokenizer->vocab_size();  // token files are checked against it
  return site;
}

bool is_hf_tokenizer_json(std::string_view blob) {
  const size_t first = blob.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && blob[first] == '{';
}

StatusOr<std::unique_ptr<Tokenizer>> tokenizer_from_blob(const std::string& blob) {
  if (blob.empty()) return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  if (is_hf_tokenizer_json(blob)) return algorithms::data::load_hf_tokenizer(blob);
  ATOLL_ASSIGN_OR_RETURN(BpeTokenizer bpe, BpeTokenizer::deserialize(blob));
  return std::unique_ptr<Tokenizer>(std::make_unique<BpeTokenizer>(std::move(bpe)));
}

StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer_file(const std::string& path) {
  ATOLL_ASSIGN_OR_RETURN(std::string json, read_file(path));
  auto tok = algorithms::data::load_hf_tokenizer(json);
  if (!tok.ok()) return InvalidArgument(path + ": " + tok.status().message());
  return tok;
}

StatusOr<Holdout> parse_holdout(const std::string& text) {
  if (text == "none") return Holdout::kNone;
  if (text == "held-out") return Holdout::kHeldOut;
  return InvalidArgument("unknown validation split '" + text +
                         "': use none (every document trains) or held-out (about 10% of the "
                         "documents, chosen by name, are kept for validation)");
}

const char* holdout_name(Holdout holdout) {
  return holdout == Holdout::kNone ? "none" : "held-out";
}

namespace {

// The tokenizer a choice names by file or blob (kinds "bpe-file", "hf", "blob"), with the blob
// checkpoints keep; "bytes" and "bpe" are made by the caller.
Status load_given_tokenizer(const TokenizerChoice& choice, SiteData& site) {
  if (choice.kind == "bpe-file") {
    ATOLL_ASSIGN_OR_RETURN(std::string blob, read_file(choice.path));
    ATOLL_ASSIGN_OR_RETURN(site.tokenizer, tokenizer_from_blob(blob));
    site.tokenizer_blob = std::move(blob);
  } else if (choice.kind == "hf") {
    ATOLL_ASSIGN_OR_RETURN(site.tokenizer, load_hf_tokenizer_file(choice.path));
    ATOLL_ASSIGN_OR_RETURN(site.tokenizer_blob, read_file(choice.path));
  } else {
    ATOLL_ASSIGN_OR_RETURN(site.tokenizer, tokenizer_from_blob(choice.blob));
    site.tokenizer_blob = choice.blob;
  }
  return Status::Ok();
}

// A token file: the ids are the given tokenizer's (hf:, bpe-file:, or a checkpoint's), which
// then counts their bytes; with "bytes" (no tokenizer given) the ids' text is unknown, the
// byte tokenizer only labels them, and bits per byte is not computed.
StatusOr<SiteData> load_token_site(const DataSpec& spec, const TokenizerChoice& choice,
                                   Holdout holdout) {
  if (choice.kind == "bpe")
    return InvalidArgument("pre-tokenized data (" + spec.to_string() +
                           ") cannot train a BPE: give the tokenizer its ids came from "
                           "(--tokenizer hf:PATH/tokenizer.json or bpe-file:PATH), or none");
  SiteData site;
  const bool tokenizer_given = choice.kind != "bytes";
  if (tokenizer_given)
    ATOLL_RETURN_IF_ERROR(load_given_tokenizer(choice, site));
  else
    site.tokenizer = std::make_unique<ByteTokenizer>();
  ATOLL_ASSIGN_OR_RETURN(std::vector<int32_t> ids, load_token_file(spec.path));
  int32_t vocab = tokenizer_given ? site.tokenizer->vocab_size() : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (tokenizer_given && ids[i] >= vocab)
      return InvalidArgument("token file " + spec.path + " holds id " + std::to_string(ids[i]) +
                             " at position " + std::to_string(i) + ", outside the " +
                             std::to_string(vocab) + " ids of tokenizer " + site.tokenizer->name() +
                             ": give the tokenizer these ids came from");
    if (!tokenizer_given) vocab = std::max(vocab, ids[i] + 1);
  }
  const size_t n_val = holdout == Holdout::kHeldOut ? ids.size() / 20 : 0;
  site.train_source = spec.to_string();
  site.validation_source = spec.to_string() + "'s held-out tail";
  site.validation_offset = static_cast<int64_t>(ids.size() - n_val);
  std::vector<int32_t> train(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(n_val));
  std::vector<int32_t> val(ids.end() - static_cast<std::ptrdiff_t>(n_val), ids.end());
  ATOLL_ASSIGN_OR_RETURN(site.train,
                         algorithms::data::dataset_from_tokens(std::move(train), vocab));
  site.train.bytes_countable = tokenizer_given;
  if (!val.empty()) {
    ATOLL_ASSIGN_OR_RETURN(site.validation,
                           algorithms::data::dataset_from_tokens(std::move(val), vocab));
    site.validation.bytes_countable = tokenizer_given;
  }
  return site;
}

}  // namespace

StatusOr<SiteData> load_site_data(const DataSpec& spec, const TokenizerChoice& choice,
                                  const std::string& brown_dir, Holdout holdout) {
  if (spec.kind == DataSpec::Kind::kTokens) return load_token_site(spec, choice, holdout);
  SiteData site;
  site.train_source = spec.to_string();
  site.validation_source = spec.to_string() + "'s held-out documents";
  ATOLL_ASSIGN_OR_RETURN(auto docs, load_documents(spec, brown_dir));
  if (docs.empty()) return InvalidArgument("data " + spec.to_string() + " holds no documents");
  algorithms::data::DocumentSplit split;
  if (holdout == Holdout::kNone)
    split.train = std::move(docs);
  else
    split = algorithms::data::split_documents(std::move(docs));
  if (holdout == Holdout::kHeldOut && (split.train.empty() || split.validation.empty()))
    return InvalidArgument("data " + spec.to_string() + " has " +
                           std::to_string(split.train.size()) + " training and " +
                           std::to_string(split.validation.size()) +
                           " validation documents; both must be non-empty (add documents)");
  site.train_documents = static_cast<int64_t>(split.train.size());
  site.validation_documents = static_cast<int64_t>(split.validation.size());
  if (choice.kind == "bytes") {
    site.tokenizer = std::make_unique<ByteTokenizer>();
  } else if (choice.kind == "bpe") {
    std::vector<std::string_view> texts;
    for (const auto& d : split.train) texts.push_back(d.text);
    ATOLL_ASSIGN_OR_RETURN(BpeTokenizer bpe, BpeTokenizer::train(texts, choice.bpe_vocab));
    site.tokenizer_blob = bpe.serialize();
    site.tokenizer = std::make_unique<BpeTokenizer>(std::move(bpe));
  } else {
    ATOLL_RETURN_IF_ERROR(load_given_tokenizer(choice, site));
  }
  site.train = algorithms::data::build_dataset(split.train, *site.tokenizer);
  if (!split.validation.empty())
    site.validation = algorithms::data::build_dataset(split.validation, *site.tokenizer);
  return site;
}

Status check_fits_vocabulary(const SiteData& site, int32_t model_vocab) {
  const int32_t used = std::max(site.train.vocab_size, site.validation.vocab_size);
  if (used <= model_vocab) return Status::Ok();
  auto outside = [&](const algorithms::data::TokenDataset& data, const std::string& source,
                     int64_t offset) -> Status {
    for (size_t i = 0; i < data.tokens.size(); ++i) {
      const int32_t id = data.tokens[i] < 0 ? ~data.tokens[i] : data.tokens[i];  // masked_token
      if (id >= model_vocab)
        return InvalidArgument(
            (source.empty() ? std::string("the data") : source) + " holds token id " +
            std::to_string(id) + " at position " + std::to_string(offset + int64_t(i)) +
            " (ids reach " + std::to_string(used - 1) + "), outside the model's vocabulary of " +
            std::to_string(model_vocab) + " ids: give data of the model's tokenizer");
    }
    return Status::Ok();
  };
  ATOLL_RETURN_IF_ERROR(outside(site.train, site.train_source, 0));
  ATOLL_RETURN_IF_ERROR(outside(site.validation, site.validation_source, site.validation_offset));
  return InvalidArgument("the data holds token ids up to " + std::to_string(used - 1) +
                         ", outside the model's vocabulary of " + std::to_string(model_vocab) +
                         " ids: give data of the model's tokenizer");
}

StatusOr<SiteData> load_site_training_data(const SiteDataOptions& options) {
  auto spec = parse_data_spec(options.train_spec);
  if (!spec.ok()) return InvalidArgument("--data: " + spec.status().message());
  if (!options.val_spec.empty() && options.holdout == Holdout::kHeldOut)
    return InvalidArgument(
        "--val-data and --val-split held-out both give the site a validation set: use one");
  TokenizerChoice tokenizer;
  if (!options.tokenizer_blob.empty()) {
    tokenizer.kind = "blob";
    tokenizer.blob = options.tokenizer_blob;
  }
  auto site = load_site_data(*spec, tokenizer, options.brown_dir, options.holdout);
  if (!site.ok()) return InvalidArgument("--data: " + site.status().message());
  // Two tokens are one input and one target: anything less cannot train a step.
  if (site->train.size() < 2)
    return InvalidArgument("--data " + spec->to_string() + " holds " +
                           std::to_string(site->train.size()) +
                           " training tokens, too few to train on: add documents");
  if (!options.val_spec.empty()) {
    auto val_spec = parse_data_spec(options.val_spec);
    if (!val_spec.ok()) return InvalidArgument("--val-data: " + val_spec.status().message());
    ATOLL_RETURN_IF_ERROR(set_validation_data(*site, *val_spec, options.brown_dir));
  }
  // A site's validation is reported and compared in bits per byte (site_val_bpb, --keep-best).
  if (site->validation.size() > 0 && !site->validation.bytes_countable)
    return InvalidArgument(
        "--data " + spec->to_string() +
        ": a site's own validation is measured in bits per byte, and token ids without their "
        "tokenizer have no byte count: drop --val-split/--val-data (the coordinator evaluates "
        "with text data), or join with a --base checkpoint that carries the ids' tokenizer");
  return site;
}

Status set_validation_data(SiteData& site, const DataSpec& val, const std::string& brown_dir) {
  const std::string what = "--val-data " + val.to_string();
  if (val.kind != DataSpec::Kind::kTokens && !site.train.bytes_countable)
    return InvalidArgument(what +
                           ": the model's token ids come without their tokenizer, so "
                           "text cannot be tokenized as they were: validate with a token "
                           "file of the same ids, or train with --tokenizer hf:PATH (the "
                           "ids' tokenizer)");
  if (val.kind == DataSpec::Kind::kTokens) {
    auto ids = load_token_file(val.path);
    if (!ids.ok()) return InvalidArgument(what + ": " + ids.status().message());
    // Ids are the tokenizer's (load_token_file refused negative ones). Token ids without their
    // tokenizer reach as far as they do: the model's vocabulary is checked against them later
    // (check_fits_vocabulary).
    int32_t ids_known = std::max(site.tokenizer->vocab_size(), site.train.vocab_size);
    for (int32_t id : *ids) {
      if (!site.train.bytes_countable) {
        ids_known = std::max(ids_known, id + 1);
      } else if (id >= ids_known) {
        return InvalidArgument(what + " holds token id " + std::to_string(id) + ", outside the " +
                               std::to_string(ids_known) + " ids of tokenizer " +
                               site.tokenizer->name() + ": give ids of the same tokenizer");
      }
    }
    auto tokens = algorithms::data::dataset_from_tokens(std::move(*ids), ids_known);
    if (!tokens.ok()) return InvalidArgument(what + ": " + tokens.status().message());
    site.validation = std::move(*tokens);
    site.validation_source = val.to_string();
    site.validation_offset = 0;
    // The ids are the site's tokenizer's: their bytes count when the training data's do.
    site.validation.bytes_countable = site.train.bytes_countable;
    site.validation_documents = 0;
  } else {
    auto docs = load_documents(val, brown_dir);
    if (!docs.ok()) return InvalidArgument(what + ": " + docs.status().message());
    if (docs->empty()) return InvalidArgument(what + " holds no documents: add documents");
    site.validation = algorithms::data::build_dataset(*docs, *site.tokenizer);
    site.validation_documents = static_cast<int64_t>(docs->size());
    site.validation_source = val.to_string();
    site.validation_offset = 0;
  }
  if (site.validation.size() < 2)
    return InvalidArgument(what + " holds " + std::to_string(site.validation.size()) +
                           " tokens, too few to evaluate: add documents");
  return Status::Ok();
}

}  // namespace atl::node
