#include "coordinator/http/static_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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

StaticFiles::StaticFiles(std::vector<Mount> mounts) : mounts_(std::move(mounts)) {
  std::sort(mounts_.begin(), mounts_.end(), [](const Mount& a, const Mount& b) {
    return a.url_prefix.size() > b.url_prefix.size();
  });
}

StatusOr<StaticFile> StaticFiles::get(const std::string& raw_path) const {
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
  return StaticFile{type, ss.str()};
}

}  // namespace atl::coordinator::http
