// Fine-tuning records in JSON Lines: one JSON object per line, either
//   {"prompt": "...", "response": "..."}   the model reads the prompt and is trained on the
//                                          response only (Document::prompt_bytes)
//   {"text": "..."}                        trained on all of it, like a text document
// Blank lines are skipped, and a UTF-8 byte order mark at the start of the file. Any other key,
// a key given twice, a value that is not a string, an empty text or response, bytes that are
// not UTF-8 (with their offset in the line), or a line that is not one JSON object is refused
// with the line number.
#pragma once

#include <string_view>
#include <vector>

#include "algorithms/data/brown.h"
#include "kernels/core/status.h"

namespace atl::algorithms::data {

// The records of `contents` as documents named "<base name of file_name>:<line>" (1-based), in
// file order; text = prompt + response, prompt_bytes = the prompt's size. Errors are one line:
// "<file_name> line <n>: <what is wrong>".
StatusOr<std::vector<Document>> parse_jsonl_records(std::string_view contents,
                                                    std::string_view file_name);

}  // namespace atl::algorithms::data
