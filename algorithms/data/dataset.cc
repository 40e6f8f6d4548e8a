#include "algorithms/data/dataset.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kernels/core/check.h"
#include "kernels/core/philox.h"
#include "kernels/core/sha256.h"

namespace atl::algorithms::data {

namespace {

// "datasamp" in ASCII: separates the data sampler's Philox key from other uses of the seed.
constexpr uint64_t kDataSalt = 0x6461746173616D70ull;

}  // namespace

TokenDataset build_dataset(std::span<const Document> docs, const Tokenizer& tokenizer) {
  // Text pieces to encode: per document its prompt (possibly empty) and the rest, then the
  // separator last.
  std::vector<std::string_view> texts;
  texts.reserve(2 * docs.size() + 1);
  for (const Document& d : docs) {
    const size_t prompt = std::min(d.prompt_bytes, d.text.size());
    const std::string_view text(d.text);
    texts.push_back(text.substr(0, prompt));
    texts.push_back(text.substr(prompt));
  }
  texts.push_back(kDocumentSeparator);
  std::vector<std::vector<int32_t>> encoded = tokenizer.encode_many(texts);
  const std::vector<int32_t>& sep = encoded.back();

  TokenDataset out;
  out.vocab_size = tokenizer.vocab_size();
  size_t total = 0;
  for (size_t i = 0; i < 2 * docs.size(); ++i) total += encoded[i].size();
  out.tokens.reserve(total + docs.size() * sep.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0) {
      out.tokens.insert(out.tokens.end(), sep.begin(), sep.end());
      out.bytes += static_cast<int64_t>(kDocumentSeparator.size());
    }
    for (int32_t id : encoded[2 * i]) out.tokens.push_back(masked_token(id));
    out.tokens.insert(out.tokens.end(), encoded[2 * i + 1].begin(), encoded[2 * i + 1].end());
    out.bytes += static_cast<int64_t>(texts[2 * i + 1].size());
  }
  return out;
}

StatusOr<TokenDataset> dataset_from_tokens(std::vector<int32_t> tokens, int32_t vocab_size) {
  if (vocab_size <= 0) return InvalidArgument("vocab_size must be positive");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return InvalidArgument("the token at position " + std::to_string(i) + " is " +
                             std::to_string(tokens[i]) + ", outside the vocabulary [0, " +
                             std::to_string(vocab_size) + ")");
  TokenDataset out;
  out.tokens = std::move(tokens);
  out.vocab_size = vocab_size;
  out.bytes_countable = false;
  return out;
}

DocumentSplit split_lone_document(Document doc) {
  const std::string& text = doc.text;
  const size_t at = text.size() / 10 * 9 + (text.size() % 10) * 9 / 10;  // floor(0.9 · size)
  size_t cut = text.find('\n', at == 0 ? 0 : at - 1);
  if (cut != std::string::npos && cut + 1 < text.size()) {
    cut += 1;  // the line after the break
  } else {
    cut = at;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  }
  Document train = doc, validation = doc;
  train.name += "[train]";
  train.text = text.substr(0, cut);
  validation.name += "[validation]";
  validation.text = text.substr(cut);
  DocumentSplit out;
  if (!train.text.empty()) out.train.push_back(std::move(train));
  if (!validation.text.empty()) out.validation.push_back(std::move(validation));
  return out;
}

DocumentSplit split_documents(std::vector<Document> docs) {
  // A lone prompt/response record is not cut by position (that would split its response).
  if (docs.size() == 1 && docs.front().prompt_bytes == 0)
    return split_lone_document(std::move(docs.front()));
  DocumentSplit out;
  for (Document& d : docs) (is_validation(d) ? out.validation : out.train).push_back(std::move(d));
  return out;
}

RowRange rows_for_worker(int B, int W, int w) {
  if (W < 1 || w < 0 || w >= W || B < 0)
    internal_error("data sampler precondition violated: rows_for_worker(B=" + std::to_string(B) +
                   ", W=" + std::to_string(W) + ", w=" + std::to_string(w) + ")");
  const int base = B / W, extra = B % W;
  const int begin = w * base + std::min(w, extra);
  return {begin, begin + base + (w < extra ? 1 : 0)};
}

Status check_sampling(const TokenDataset& data, int B, int T) {
  if (B <= 0 || T <= 0)
    return InvalidArgument("batch size and sequence length must be positive (got B=" +
                           std::to_string(B) + ", T=" + std::to_string(T) + ")");
  if (data.size() < static_cast<int64_t>(T) + 1)
    return InvalidArgument("dataset has " + std::to_string(data.size()) +
                           " tokens, fewer than one window of T+1=" + std::to_string(T + 1));
  return Status::Ok();
}

int64_t window_offset(const TokenDataset& data, uint64_t seed, int64_t step, int row, int T) {
  const uint64_t choices = static_cast<uint64_t>(data.size() - T);  // offsets 0 .. N-T-1
  Philox rng(seed ^ kDataSalt, static_cast<uint64_t>(step));
  return static_cast<int64_t>(rng.below(static_cast<uint64_t>(row), choices));
}

GlobalBatch sample_rows(const TokenDataset& data, uint64_t seed, int64_t step, RowRange rows,
                        int T) {
  if (Status s = check_sampling(data, 1, T); !s.ok())
    internal_error("data sampler precondition violated: " + s.message());
  if (rows.begin < 0 || rows.end < rows.begin)
    internal_error("data sampler precondition violated: bad row range [" +
                   std::to_string(rows.begin) + ", " + std::to_string(rows.end) + ")");
  GlobalBatch out;
  out.B = rows.size();
  out.T = T;
  out.tokens.resize(static_cast<size_t>(out.B) * (T + 1));
  for (int r = 0; r < out.B; ++r) {
    const int64_t off = window_offset(data, seed, step, rows.begin + r, T);
    std::copy_n(data.tokens.begin() + off, T + 1,
                out.tokens.begin() + static_cast<ptrdiff_t>(r) * (T + 1));
  }
  return out;
}

void split_inputs_targets(const int32_t* tokens, int rows, int T, std::vector<int32_t>& inputs,
                          std::vector<int32_t>& targets) {
  inputs.resize(static_cast<size_t>(rows) * T);
  targets.resize(static_cast<size_t>(rows) * T);
  for (int b = 0; b < rows; ++b) {
    const int32_t* row = tokens + static_cast<size_t>(b) * (T + 1);
    int32_t* in = inputs.data() + static_cast<size_t>(b) * T;
    int32_t* tg = targets.data() + static_cast<size_t>(b) * T;
    for (int t = 0; t < T; ++t) {
      in[t] = token_id(row[t]);
      tg[t] = is_target(row[t + 1]) ? row[t + 1] : -1;
    }
  }
}

GlobalBatch sample_global_batch(const TokenDataset& data, uint64_t seed, int64_t step, int B,
                                int T) {
  if (Status s = check_sampling(data, B, T); !s.ok())
    internal_error("data sampler precondition violated: " + s.message());
  return sample_rows(data, seed, step, RowRange{0, B}, T);
}

std::string batch_sha256(std::span<const int32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    return sha256_hex(tokens.data(), tokens.size_bytes());
  } else {
    std::vector<uint8_t> le(tokens.size() * 4);
    for (size_t i = 0; i < tokens.size(); ++i) {
      uint32_t v = static_cast<uint32_t>(tokens[i]);
      for (int b = 0; b < 4; ++b) le[4 * i + b] = static_cast<uint8_t>(v >> (8 * b));
    }
    return sha256_hex(le.data(), le.size());
  }
}

std::vector<GlobalBatch> evaluation_batches(const TokenDataset& data, int T, int64_t max_tokens,
                                            int B) {
  if (Status s = check_sampling(data, B, T); !s.ok())
    internal_error("data sampler precondition violated: " + s.message());
  int64_t windows = (data.size() - 1) / T;
  if (max_tokens > 0) windows = std::min(windows, max_tokens / T);
  std::vector<GlobalBatch> out;
  for (int64_t first = 0; first < windows; first += B) {
    GlobalBatch b;
    b.B = static_cast<int>(std::min<int64_t>(B, windows - first));
    b.T = T;
    b.tokens.resize(static_cast<size_t>(b.B) * (T + 1));
    for (int r = 0; r < b.B; ++r)
      std::copy_n(data.tokens.begin() + (first + r) * T, T + 1,
                  b.tokens.begin() + static_cast<ptrdiff_t>(r) * (T + 1));
    out.push_back(std::move(b));
  }
  return out;
}

int64_t target_bytes(const GlobalBatch& batch, const Tokenizer& tokenizer) {
  int64_t bytes = 0;
  for (int r = 0; r < batch.B; ++r) {
    std::span<const int32_t> row = batch.row(r);
    for (int t = 1; t <= batch.T; ++t)
      if (is_target(row[t])) bytes += tokenizer.token_bytes(row[t]);
  }
  return bytes;
}

double bits_per_byte(double mean_loss_nats_per_token, int64_t tokens, int64_t bytes) {
  if (bytes <= 0) return std::numeric_limits<double>::quiet_NaN();
  return mean_loss_nats_per_token * static_cast<double>(tokens) /
         (std::log(2.0) * static_cast<double>(bytes));
}

}  // namespace atl::algorithms::data
