// Checks that stay in every build type. assert() is compiled out of release builds, so it must
// not guard memory safety (bounds, sizes): ATOLL_CHECK does, at the cost of one compare and a
// branch predicted not taken. Keep checks out of per-element loops: check sizes once at the
// entry of a function, then loop.
//
// Errors a user can cause (bad flag, file, config, message) are Status values, never checks:
// a failed check means a bug in Atoll.
#pragma once

#include <string_view>

#include "kernels/core/status.h"

namespace atl {

// A broken invariant: prints "atoll: internal error: <message>" on stderr and aborts.
[[noreturn]] void internal_error(std::string_view message);

// A tool that cannot go on (a bench binary whose setup or device call failed): prints
// "<message>" on stderr and exits with code 1. Library code returns a Status instead.
[[noreturn]] void die(std::string_view message);

// A tool's "or die" for a Status: when `status` is an error, die("<context>: <status>").
void die_if_error(const Status& status, std::string_view context);

// ATOLL_CHECK's failure path: "atoll: internal error: <file>:<line>: check `<condition>`
// failed: <message>", then abort.
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               std::string_view message);

}  // namespace atl

// Aborts with file:line, the condition and `message` (anything convertible to
// std::string_view; only evaluated when the check fails) when `condition` is false.
#define ATOLL_CHECK(condition, message)                               \
  do {                                                                \
    if (!(condition)) [[unlikely]]                                    \
      ::atl::check_failed(__FILE__, __LINE__, #condition, (message)); \
  } while (0)
