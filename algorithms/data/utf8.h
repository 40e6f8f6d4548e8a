// UTF-8 validity of byte strings (files people wrote, with whatever editor).
#pragma once

#include <cstddef>
#include <string_view>

namespace atl::algorithms::data {

// Byte offset (0-based) of the first byte of `text` that does not begin a well-formed UTF-8
// character (overlong forms, surrogates and code points past U+10FFFF are ill-formed), or
// std::string_view::npos when all of `text` is UTF-8.
size_t first_invalid_utf8(std::string_view text);

// The three bytes a UTF-8 byte order mark is written as (U+FEFF).
inline constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";

}  // namespace atl::algorithms::data
