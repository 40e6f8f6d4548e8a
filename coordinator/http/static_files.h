// Static files of the dashboard. Each mount maps a URL prefix to a directory; a request path is
// percent-decoded and must be a plain relative path below its mount (no "..", no ".", no
// backslash, no NUL, no hidden files), the file must resolve (symlinks followed) inside the
// mount's directory, and only known file types are served, with their content type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/status.h"

namespace atl::coordinator::http {

struct Mount {
  std::string url_prefix;  // "/" or "/vendor/" (begins and ends with '/')
  std::string dir;         // directory on disk
};

struct StaticFile {
  std::string content_type;
  std::string body;
};

// Percent-decodes `path` (no query). INVALID_ARGUMENT on a malformed escape or a NUL.
StatusOr<std::string> percent_decode(const std::string& path);

// "text/html; charset=utf-8", ... ; "" for a type that is not served.
std::string content_type_for(const std::string& filename);

class StaticFiles {
 public:
  explicit StaticFiles(std::vector<Mount> mounts);  // longest prefix wins
  // `path` is the URL path (percent-encoded, no query); "/" serves index.html. NOT_FOUND for
  // missing files and for everything refused (the reason is in the message).
  StatusOr<StaticFile> get(const std::string& path) const;

  static constexpr uint64_t kMaxFileBytes = 16u << 20;

 private:
  std::vector<Mount> mounts_;
};

}  // namespace atl::coordinator::http
