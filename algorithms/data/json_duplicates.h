// Duplicate keys in JSON text. boost::json::parse keeps the last of two equal keys of an object
// without a word, so that what a document means would depend on which copy comes last (a second
// tensor of the same name in a safetensors header, {"role":"viewer","role":"admin"} in a request):
// readers that must not guess look for them first.
#pragma once

#include <string>
#include <string_view>

namespace atl::algorithms {

// The first key that appears twice in one object of `text`, as its path from the root (object
// keys joined by '.', e.g. "model.dim"); "" when there is none, and also when `text` is not
// JSON (the parse that follows reports that).
std::string first_duplicate_key(std::string_view text);

}  // namespace atl::algorithms
