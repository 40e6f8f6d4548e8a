#include "node/data_source.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "algorithms/data/jsonl.h"
#include "kernels/core/file_io.h"

namespace atl::node {

namespace fs = std::filesystem;
using algorithms::data::BrownGenre;
using algorithms::data::Document;

namespace {

constexpr std::string_view kSpecHelp =
    "expected 'brown', 'brown:<genre letters, comma-separated>', 'text:<file or directory>', "
    "'jsonl:<file>' or 'tokens:<file>.u16|.i32'";

std::string genre_letters() {
  std::string s;
  for (const BrownGenre& g : algorithms::data::brown_genres()) s.push_back(g.letter);
  return s;
}

enum class TokenWidth { kNone, kU16, kI32 };

TokenWidth token_width(std::string_view path) {
  if (path.ends_with(".u16")) return TokenWidth::kU16;
  if (path.ends_with(".i32")) return TokenWidth::kI32;
  return TokenWidth::kNone;
}

}  // namespace

std::string DataSpec::to_string() const {
  switch (kind) {
    case Kind::kBrown: {
      if (genres.empty()) return "brown";
      std::string s = "brown:";
      for (size_t i = 0; i < genres.size(); ++i) {
        if (i) s.push_back(',');
        s.push_back(genres[i]);
      }
      return s;
    }
    case Kind::kText:
      return "text:" + path;
    case Kind::kTokens:
      return "tokens:" + path;
    case Kind::kJsonl:
      return "jsonl:" + path;
  }
  return "";
}

StatusOr<DataSpec> parse_data_spec(std::string_view spec) {
  const std::string quoted = "data spec '" + std::string(spec) + "'";
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const bool has_arg = colon != std::string_view::npos;
  const std::string_view arg = has_arg ? spec.substr(colon + 1) : std::string_view();
  DataSpec out;
  if (kind == "brown") {
    out.kind = DataSpec::Kind::kBrown;
    if (!has_arg) return out;
    if (arg.empty())
      return InvalidArgument(quoted + ": no genres after 'brown:' (genres are " + genre_letters() +
                             ")");
    for (size_t i = 0; i <= arg.size();) {
      size_t comma = arg.find(',', i);
      if (comma == std::string_view::npos) comma = arg.size();
      std::string_view item = arg.substr(i, comma - i);
      if (item.size() != 1 || !algorithms::data::find_brown_genre(item[0]))
        return InvalidArgument(quoted + ": '" + std::string(item) +
                               "' is not a Brown genre letter (genres are " + genre_letters() +
                               ")");
      if (out.genres.find(item[0]) != std::string::npos)
        return InvalidArgument(quoted + ": genre '" + std::string(item) + "' is listed twice");
      out.genres.push_back(item[0]);
      i = comma + 1;
    }
    std::sort(out.genres.begin(), out.genres.end());
    return out;
  }
  if (kind == "text" || kind == "tokens" || kind == "jsonl") {
    if (!has_arg || arg.empty())
      return InvalidArgument(quoted + ": missing path after '" + std::string(kind) + ":'");
    out.kind = kind == "text"    ? DataSpec::Kind::kText
               : kind == "jsonl" ? DataSpec::Kind::kJsonl
                                 : DataSpec::Kind::kTokens;
    out.path = std::string(arg);
    if (out.kind == DataSpec::Kind::kTokens && token_width(arg) == TokenWidth::kNone)
      return InvalidArgument(quoted +
                             ": a token file's name must end in .u16 (little-endian uint16) or "
                             ".i32 (little-endian int32)");
    return out;
  }
  return InvalidArgument(quoted + ": " + std::string(kSpecHelp));
}

namespace {

StatusOr<std::vector<Document>> load_brown(const DataSpec& spec, const std::string& dir) {
  std::error_code ec;
  const std::string missing = "Brown corpus not found at " + dir + ": run deploy/install-deps.sh";
  if (!fs::is_directory(dir, ec)) return NotFound(missing);
  const std::string letters = spec.genres.empty() ? genre_letters() : spec.genres;
  std::vector<Document> docs;
  for (char letter : letters) {
    const BrownGenre* g = algorithms::data::find_brown_genre(letter);
    if (!g) return InvalidArgument(std::string("unknown Brown genre '") + letter + "'");
    for (int i = 1; i <= g->documents; ++i) {
      Document d;
      d.name = {'c', letter, static_cast<char>('0' + i / 10), static_cast<char>('0' + i % 10)};
      const std::string file = (fs::path(dir) / d.name).string();
      auto raw = read_file(file);
      if (!raw.ok())
        return NotFound("Brown corpus not found at " + dir + " (missing " + d.name +
                        "): run deploy/install-deps.sh");
      d.genre = std::string(1, letter);
      d.genre_name = g->name;
      d.text = algorithms::data::brown_to_text(*raw);
      docs.push_back(std::move(d));
    }
  }
  return docs;
}

// The *.txt files directly inside `dir`, sorted by name: regular files and links to them. A
// directory named *.txt (or a link to one) is skipped, being no file. Any other *.txt entry is
// refused naming it, the first by name: a link that points nowhere or at itself was skipped or
// refused depending on where the directory listed it, and would silently leave out what its
// name says is data.
StatusOr<std::vector<fs::path>> list_text_files(const std::string& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".txt") entries.push_back(it->path());
  }
  if (ec) return IoError("cannot list " + dir + ": " + ec.message());
  std::sort(entries.begin(), entries.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  const std::string rule = ": text:" + dir +
                           " reads every *.txt file in it; remove the entry, "
                           "or make it the text file it names";
  std::vector<fs::path> files;
  for (const fs::path& f : entries) {
    std::error_code status_ec;
    const fs::file_status st = fs::status(f, status_ec);  // follows symbolic links
    if (st.type() == fs::file_type::regular) {
      files.push_back(f);
    } else if (st.type() == fs::file_type::not_found) {
      std::error_code link_ec;
      const fs::path target = fs::read_symlink(f, link_ec);
      if (link_ec) return IoError(f.string() + " disappeared while " + dir + " was read");
      return InvalidArgument(f.string() + " is a symbolic link to " + target.string() +
                             ", which does not exist" + rule);
    } else if (status_ec) {
      return InvalidArgument(f.string() + " cannot be followed (" + status_ec.message() + ")" +
                             rule);
    } else if (st.type() != fs::file_type::directory) {
      return InvalidArgument(f.string() + " is not a regular file (a pipe, socket or device)" +
                             rule);
    }
  }
  if (files.empty()) return NotFound("no *.txt files in directory " + dir);
  return files;
}

StatusOr<std::vector<Document>> load_text(const std::string& path) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    ATOLL_ASSIGN_OR_RETURN(files, list_text_files(path));
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    return NotFound("text data not found: " + path + " is neither a file nor a directory");
  }
  std::vector<Document> docs;
  for (const fs::path& f : files) {
    auto text = read_file(f.string());
    if (!text.ok()) return text.status();
    Document d;
    d.name = f.filename().string();
    d.genre_name = "text";
    d.text = std::move(*text);
    docs.push_back(std::move(d));
  }
  return docs;
}

}  // namespace

StatusOr<std::vector<Document>> load_documents(const DataSpec& spec, const std::string& brown_dir) {
  switch (spec.kind) {
    case DataSpec::Kind::kBrown:
      return load_brown(spec, brown_dir);
    case DataSpec::Kind::kText:
      return load_text(spec.path);
    case DataSpec::Kind::kJsonl: {
      std::error_code ec;
      if (!fs::is_regular_file(spec.path, ec))
        return NotFound("jsonl data not found: " + spec.path + " is not a file");
      ATOLL_ASSIGN_OR_RETURN(std::string contents, read_file(spec.path));
      return algorithms::data::parse_jsonl_records(contents, spec.path);
    }
    case DataSpec::Kind::kTokens:
      return InvalidArgument("data spec '" + spec.to_string() +
                             "' is pre-tokenized: it has tokens, not documents (load_token_file)");
  }
  return Internal("unknown data spec kind");
}

StatusOr<std::vector<int32_t>> load_token_file(const std::string& path) {
  const TokenWidth width = token_width(path);
  if (width == TokenWidth::kNone)
    return InvalidArgument("token file " + path + ": name must end in .u16 or .i32");
  auto raw = read_file(path);
  if (!raw.ok()) return raw.status();
  const size_t elem = width == TokenWidth::kU16 ? 2 : 4;
  if (raw->empty())
    return InvalidArgument("token file " + path + " is empty: it holds no tokens to train on");
  if (raw->size() % elem != 0)
    return DataLoss("token file " + path + ": size " + std::to_string(raw->size()) +
                    " bytes is not a multiple of " + std::to_string(elem) + " (truncated?)");
  const auto* p = reinterpret_cast<const unsigned char*>(raw->data());
  std::vector<int32_t> tokens(raw->size() / elem);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const unsigned char* q = p + i * elem;
    if (width == TokenWidth::kU16) {
      tokens[i] = static_cast<int32_t>(q[0] | (q[1] << 8));
    } else {
      uint32_t v = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8) |
                   (static_cast<uint32_t>(q[2]) << 16) | (static_cast<uint32_t>(q[3]) << 24);
      tokens[i] = static_cast<int32_t>(v);
      if (tokens[i] < 0)
        return DataLoss("token file " + path + ": token " + std::to_string(i) + " is negative (" +
                        std::to_string(tokens[i]) + ")");
    }
  }
  return tokens;
}

Status write_token_file(const std::string& path, std::span<const int32_t> tokens) {
  const TokenWidth width = token_width(path);
  if (width == TokenWidth::kNone)
    return InvalidArgument("token file " + path + ": name must end in .u16 or .i32");
  const size_t elem = width == TokenWidth::kU16 ? 2 : 4;
  std::string bytes(tokens.size() * elem, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || (width == TokenWidth::kU16 && t > 65535))
      return InvalidArgument("token " + std::to_string(i) + " = " + std::to_string(t) +
                             " does not fit " + (width == TokenWidth::kU16 ? ".u16" : ".i32"));
    const uint32_t v = static_cast<uint32_t>(t);
    for (size_t b = 0; b < elem; ++b) bytes[i * elem + b] = static_cast<char>(v >> (8 * b));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot write " + path + ": " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return IoError("error writing " + path);
  return Status::Ok();
}

}  // namespace atl::node
