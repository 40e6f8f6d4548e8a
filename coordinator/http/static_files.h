// Static files of the dashboard. Each mount maps a URL prefix to a directory; a request path is
// percent-decoded and must be a plain relative path below its mount (no "..", no ".", no
// backslash, no NUL, no hidden files), the file must resolve (symlinks followed) inside the
// mount's directory, and only known file types are served, with their content type.
//
// Each file has a strong ETag (a hash of its bytes; the gzip form has its own tag) so that a
// browser revalidates with If-None-Match and gets 304 instead of the file. Text types (HTML,
// CSS, JS, JSON, SVG, text) are sent gzip-compressed to clients that accept it. Files are read
// on every request (edits show at once); the compressed form is cached per file until its size
// or modification time changes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
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
  std::string body;   // the file's bytes, gzip-compressed when `gzip`
  std::string etag;   // quoted: "\"<32 hex digits>\"" (a "-gz" suffix for the gzip form)
  bool gzip = false;  // send Content-Encoding: gzip
};

// Percent-decodes `path` (no query). INVALID_ARGUMENT on a malformed escape or a NUL.
StatusOr<std::string> percent_decode(const std::string& path);

// "text/html; charset=utf-8", ... ; "" for a type that is not served.
std::string content_type_for(const std::string& filename);

// Whether an Accept-Encoding header value accepts gzip ("gzip" or "*" with a q-value above 0).
bool accepts_gzip(const std::string& accept_encoding);
// Whether an If-None-Match header value matches `etag` ("*", or one of a comma-separated list
// of tags, weak "W/" tags compared by their opaque part, as RFC 9110's weak comparison).
bool etag_matches(const std::string& if_none_match, const std::string& etag);
// gzip (RFC 1952) of `data` at the default level.
StatusOr<std::string> gzip_compress(const std::string& data);

class StaticFiles {
 public:
  explicit StaticFiles(std::vector<Mount> mounts);  // longest prefix wins
  // `path` is the URL path (percent-encoded, no query); "/" serves index.html. NOT_FOUND for
  // missing files and for everything refused (the reason is in the message). With
  // `accept_gzip`, a text file comes gzip-compressed (when that is smaller).
  StatusOr<StaticFile> get(const std::string& path, bool accept_gzip = false) const;

  static constexpr uint64_t kMaxFileBytes = 16u << 20;

 private:
  struct Compressed {
    std::string plain_etag;  // of the file the compressed body was made from
    std::string body;
  };
  std::vector<Mount> mounts_;
  // canonical file path -> its gzip form (thread-safe: the server's workers share this object).
  mutable std::mutex cache_mutex_;
  mutable std::map<std::string, std::shared_ptr<const Compressed>> gzip_cache_;
};

}  // namespace atl::coordinator::http
