#include "coordinator/http/static_files.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/sha256.h"

namespace atl::coordinator::http {
namespace fs = std::filesystem;

StatusOr<std::string> percent_decode(const std::string& path) {
  std::string out;
  out.reserve(path.size());
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '%') {
      if (i + 2 >= path.size()) return InvalidArgument("malformed percent escape in the path");
      const int hi = hexval(path[i + 1]), lo = hexval(path[i + 2]);
      if (hi < 0 || lo < 0) return InvalidArgument("malformed percent escape in the path");
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0') return InvalidArgument("NUL in the path");
    out += c;
  }
  return out;
}

std::string content_type_for(const std::string& filename) {
  const auto dot = filename.rfind('.');
  if (dot == std::string::npos) return "";
  const std::string ext = filename.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "js" || ext == "mjs") return "text/javascript; charset=utf-8";
  if (ext == "json" || ext == "map") return "application/json";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "ico") return "image/x-icon";
  if (ext == "txt") return "text/plain; charset=utf-8";
  return "";
}

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (std::string part = trim(s.substr(start, end - start)); !part.empty()) out.push_back(part);
    start = end + 1;
  }
  return out;
}

bool compressible(const std::string& content_type) {
  return content_type.compare(0, 5, "text/") == 0 || content_type == "application/json" ||
         content_type == "image/svg+xml";
}

}  // namespace

bool accepts_gzip(const std::string& accept_encoding) {
  for (const std::string& item : split_commas(accept_encoding)) {
    const size_t semi = item.find(';');
    std::string coding = trim(item.substr(0, semi));
    std::transform(coding.begin(), coding.end(), coding.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (coding != "gzip" && coding != "x-gzip" && coding != "*") continue;
    if (semi == std::string::npos) return true;
    const std::string param = trim(item.substr(semi + 1));
    if (param.size() < 2 || (param[0] != 'q' && param[0] != 'Q') || param[1] != '=') return true;
    return std::strtod(param.c_str() + 2, nullptr) > 0;  // "q=0" refuses it
  }
  return false;
}

bool etag_matches(const std::string& if_none_match, const std::string& etag) {
  const auto opaque = [](const std::string& t) {
    return t.compare(0, 2, "W/") == 0 ? t.substr(2) : t;
  };
  for (const std::string& tag : split_commas(if_none_match))
    if (tag == "*" || opaque(tag) == opaque(etag)) return true;
  return false;
}

StatusOr<std::string> gzip_compress(const std::string& data) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return Internal("gzip: deflateInit2 failed");
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  const size_t written = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Internal("gzip: deflate did not finish");
  out.resize(written);
  return out;
}

StaticFiles::StaticFiles(std::vector<Mount> mounts) : mounts_(std::move(mounts)) {
  std::sort(mounts_.begin(), mounts_.end(), [](const Mount& a, const Mount& b) {
    return a.url_prefix.size() > b.url_prefix.size();
  });
}

StatusOr<StaticFile> StaticFiles::get(const std::string& raw_path, bool accept_gzip) const {
  ATOLL_ASSIGN_OR_RETURN(std::string path, percent_decode(raw_path));
  if (path.empty() || path[0] != '/') return NotFound("path must begin with '/'");
  if (path.back() == '/') path += "index.html";
  const Mount* mount = nullptr;
  for (const auto& m : mounts_)
    if (path.compare(0, m.url_prefix.size(), m.url_prefix) == 0) {
      mount = &m;
      break;
    }
  if (!mount) return NotFound("no such file");
  const std::string rel = path.substr(mount->url_prefix.size());
  // Every segment must be a plain name: no "", ".", "..", hidden files or backslashes.
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    const std::string seg = rel.substr(start, end - start);
    if (seg.empty() || seg[0] == '.' || seg.find('\\') != std::string::npos)
      return NotFound("refused path '" + path + "'");
    start = end + 1;
  }
  const std::string type = content_type_for(rel);
  if (type.empty()) return NotFound("file type not served: '" + path + "'");
  std::error_code ec;
  const fs::path root = fs::canonical(mount->dir, ec);
  if (ec) return NotFound("static directory " + mount->dir + " is missing");
  const fs::path file = fs::canonical(root / rel, ec);
  if (ec) return NotFound("no such file: '" + path + "'");
  // Symlinks may not lead outside the mount.
  const auto [r, f] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (r != root.end()) return NotFound("refused path '" + path + "'");
  if (!fs::is_regular_file(file, ec)) return NotFound("no such file: '" + path + "'");
  const auto size = fs::file_size(file, ec);
  if (ec || size > kMaxFileBytes) return NotFound("file too large or unreadable: '" + path + "'");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) return NotFound("unreadable file: '" + path + "'");
  StaticFile out;
  out.content_type = type;
  out.body = ss.str();
  out.etag = "\"" + sha256_hex(out.body.data(), out.body.size()).substr(0, 32) + "\"";
  if (!accept_gzip || !compressible(type) || out.body.size() < 256) return out;
  std::shared_ptr<const Compressed> gz;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = gzip_cache_.find(file.string());
    if (it != gzip_cache_.end() && it->second->plain_etag == out.etag) gz = it->second;
  }
  if (!gz) {
    auto body = gzip_compress(out.body);
    if (!body.ok()) return out;  // served uncompressed
    gz = std::make_shared<const Compressed>(Compressed{out.etag, std::move(*body)});
    std::lock_guard<std::mutex> lock(cache_mutex_);
    gzip_cache_[file.string()] = gz;
  }
  if (gz->body.size() >= out.body.size()) return out;
  out.body = gz->body;
  out.etag = out.etag.substr(0, out.etag.size() - 1) + "-gz\"";
  out.gzip = true;
  return out;
}

}  // namespace atl::coordinator::http
