// Token datasets and the global batch.
//
// The global batch of step s is a pure function of (seed, s): row r is a window of T+1 tokens
// starting at a Philox-random offset keyed by (seed, s, r). It does not depend on how many
// workers share the step, so a run resumed on a different number of nodes sees the same
// batches; batch_sha256 makes that checkable.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/data/brown.h"
#include "algorithms/data/tokenizer.h"
#include "kernels/core/status.h"

namespace atl::algorithms::data {

// Neither tokenizer has special tokens: documents are joined with this text, encoded like any
// other text: to a model a document boundary looks like a paragraph break. No vocabulary slot
// is reserved, so the byte tokenizer stays at exactly 256 ids.
inline constexpr std::string_view kDocumentSeparator = "\n\n";

// Loss masks travel inside the token array, so every path that samples, hashes, ships or splits
// rows carries them unchanged: a token the model reads but must not be trained to predict (a
// prompt token) is stored as ~id, which is negative. split_inputs_targets turns it back into id
// for the inputs and into the ignore marker -1 for the targets; the model leaves -1 targets out
// of both the loss sum and its normalizing count, and target_bytes leaves them out of bpb's byte
// count. Datasets without prompts hold no negative value, so nothing changes for them.
inline constexpr int32_t masked_token(int32_t id) {
  return ~id;
}
inline constexpr int32_t token_id(int32_t stored) {
  return stored < 0 ? ~stored : stored;
}
inline constexpr bool is_target(int32_t stored) {
  return stored >= 0;
}

// One flat token array.
struct TokenDataset {
  // (N,), each in [0, vocab_size), or ~id for a token that is never a target (see masked_token)
  std::vector<int32_t> tokens;
  int32_t vocab_size = 0;
  // Bytes of text the tokens decode to (documents and separators), for bits per byte; 0 when
  // unknown (pre-tokenized data).
  int64_t bytes = 0;
  // False for ids read from a token file without the tokenizer they came from: the text they
  // stand for is unknown, so bits per byte cannot be computed (evaluation reports NaN bpb and
  // the loss in nats per token). A token file given with its tokenizer counts its bytes.
  bool bytes_countable = true;
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

// tokens = enc(doc0) enc(sep) enc(doc1) enc(sep) ... enc(docN-1): each document encoded on its
// own (a BPE chunk never spans two documents), no separator after the last one. A document with
// a prompt (prompt_bytes > 0) is encoded as enc(prompt) enc(rest), the prompt's tokens masked
// (masked_token); the separator after it stays a target (it ends the response). `bytes` counts
// only the text the unmasked tokens stand for.
TokenDataset build_dataset(std::span<const Document> docs, const Tokenizer& tokenizer);
// Pre-tokenized data; every id must be in [0, vocab_size). bytes_countable is false until the
// caller knows the tokenizer the ids came from.
StatusOr<TokenDataset> dataset_from_tokens(std::vector<int32_t> tokens, int32_t vocab_size);

// Documents split by is_validation (order kept within each part). A lone document (one text
// file) is split by position instead: validation is its tail from the first line that starts at
// or after 90% of its bytes (split_lone_document).
struct DocumentSplit {
  std::vector<Document> train, validation;
};
DocumentSplit split_documents(std::vector<Document> docs);

// The positional 90/10 split of one document: the cut is the start of the first line at or after
// byte floor(0.9 · size); without a line break after that point, the cut is that byte itself,
// moved back to the start of a UTF-8 character. The parts are named "NAME[train]" and
// "NAME[validation]"; either may be empty for a tiny document.
DocumentSplit split_lone_document(Document doc);

// B rows of T+1 tokens, row-major: inputs are columns [0, T), targets columns [1, T+1).
struct GlobalBatch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens;  // (B, T+1)
  std::span<const int32_t> row(int r) const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(r) * (T + 1), T + 1);
  }
};

// Splits `rows` rows of T+1 tokens (the GlobalBatch layout) into the model's inputs (rows, T)
// = columns [0, T) and targets (rows, T) = columns [1, T+1); resizes both. A masked token
// (masked_token) becomes its id as an input and -1 (ignored) as a target.
void split_inputs_targets(const int32_t* tokens, int rows, int T, std::vector<int32_t>& inputs,
                          std::vector<int32_t>& targets);

// Rows [begin, end) of the global batch.
struct RowRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};
// Worker w of W gets a contiguous block; the first B % W workers get one row more. Blocks are
// in worker order and cover [0, B) exactly (workers beyond B get empty ranges).
// Requires W >= 1, 0 <= w < W, B >= 0.
RowRange rows_for_worker(int B, int W, int w);

// Checks that a dataset can serve windows of T+1 tokens and that B, T are positive. Callers
// run this once up front; the samplers below abort on a violated precondition.
Status check_sampling(const TokenDataset& data, int B, int T);

// Start of row `row`'s window at `step`, uniform in [0, N - T - 1]:
// Philox(seed ^ kDataSalt, stream = step).below(row, N - T). The salt keeps data sampling
// independent of other draws keyed by the same (seed, step).
int64_t window_offset(const TokenDataset& data, uint64_t seed, int64_t step, int row, int T);
// Rows [rows.begin, rows.end) of step `step`'s global batch: a (rows.size(), T+1) batch.
GlobalBatch sample_rows(const TokenDataset& data, uint64_t seed, int64_t step, RowRange rows,
                        int T);
// The whole (B, T+1) global batch of step `step`.
GlobalBatch sample_global_batch(const TokenDataset& data, uint64_t seed, int64_t step, int B,
                                int T);

// SHA-256 (hex) of the tokens as little-endian int32, row after row. The concatenation of
// the workers' rows (in worker order) hashes the same as the global batch.
std::string batch_sha256(std::span<const int32_t> tokens);
inline std::string batch_sha256(const GlobalBatch& batch) {
  return batch_sha256(batch.tokens);
}

// Validation: windows of T+1 tokens starting at 0, T, 2T, ... (consecutive windows share one
// token, so every token after the first is a target exactly once), K = min((N-1)/T,
// max_tokens/T) windows (max_tokens <= 0: no limit), grouped into batches of at most B rows
// in order; the last batch may be shorter. Deterministic, no randomness.
std::vector<GlobalBatch> evaluation_batches(const TokenDataset& data, int T, int64_t max_tokens,
                                            int B);

// Bytes of text the targets (columns 1..T of every row) stand for; masked targets count 0.
int64_t target_bytes(const GlobalBatch& batch, const Tokenizer& tokenizer);

// Bits per byte from a mean cross-entropy in nats per token over `tokens` targets covering
// `bytes` bytes: loss * tokens / (ln 2 * bytes). NaN when bytes <= 0.
double bits_per_byte(double mean_loss_nats_per_token, int64_t tokens, int64_t bytes);

}  // namespace atl::algorithms::data
