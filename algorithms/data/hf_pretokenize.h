// The pre-tokenizer split patterns of Hugging Face byte-level BPE tokenizers, matched by hand.
//
// A tokenizer.json names its split as a regular expression; Atoll recognises the three in
// common use by their exact text and implements each as the leftmost-first alternation the
// regex engine runs (including the backtracking of \s+(?!\S) and \s*[\r\n]+):
//   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama-3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2   the Llama-3 pattern with \p{N} (one digit a piece) instead of \p{N}{1,3}
// Character classes come from ICU: \p{L} is general category L*, \p{N} is N*, \s is the
// Unicode White_Space property. Case-insensitive contractions fold ASCII letters and U+017F
// (long s, which folds to s). Bytes that are not valid UTF-8 are single characters of no class
// (so they fall to [^\s\p{L}\p{N}]), which keeps every split lossless on any bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::data {

enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

// The pattern strings exactly as tokenizer.json holds them (after JSON unescaping).
std::string_view split_pattern_regex(SplitPattern pattern);
const char* split_pattern_name(SplitPattern pattern);  // "gpt2", "llama3", "qwen2"

// The pattern whose regex is `regex`, or InvalidArgument naming the three that are supported.
StatusOr<SplitPattern> recognise_split_pattern(std::string_view regex);

// The pieces the pattern cuts `text` into, in order; their concatenation is `text`.
std::vector<std::string_view> split_pretokens(std::string_view text, SplitPattern pattern);

}  // namespace atl::algorithms::data
