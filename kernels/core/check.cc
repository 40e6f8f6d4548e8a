#include "kernels/core/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace atl {

void internal_error(std::string_view message) {
  std::fprintf(stderr, "atoll: internal error: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

void die(std::string_view message) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::exit(1);
}

void die_if_error(const Status& status, std::string_view context) {
  if (!status.ok()) die(std::string(context) + ": " + status.to_string());
}

void check_failed(const char* file, int line, const char* condition, std::string_view message) {
  internal_error(std::string(file) + ":" + std::to_string(line) + ": check `" + condition +
                 "` failed: " + std::string(message));
}

}  // namespace atl
