#include "algorithms/data/jsonl.h"

#include <boost/json.hpp>
#include <cstdio>
#include <string>

#include "algorithms/data/json_duplicates.h"
#include "algorithms/data/utf8.h"

namespace atl::algorithms::data {

namespace {

namespace json = boost::json;

constexpr std::string_view kRecordHelp =
    "each line must be {\"prompt\": \"...\", \"response\": \"...\"} or {\"text\": \"...\"}";

// `key` in double quotes (appended piecewise: GCC 12 warns falsely on "\"" + std::string).
std::string quoted(std::string_view key) {
  std::string s;
  s.reserve(key.size() + 2);
  s.push_back('"');
  s.append(key);
  s.push_back('"');
  return s;
}

// The string value of `key` in `obj`, or an error naming the key.
StatusOr<std::string> string_field(const json::object& obj, std::string_view key) {
  const json::value* v = obj.if_contains(key);
  if (v == nullptr) return InvalidArgument("missing " + quoted(key));
  if (!v->is_string())
    return InvalidArgument(quoted(key) + " must be a string, got " +
                           std::string(json::to_string(v->kind())));
  return std::string(v->as_string());
}

StatusOr<Document> parse_record(std::string_view line) {
  // Before the parse, which calls bad UTF-8 a syntax error without saying where.
  if (const size_t bad = first_invalid_utf8(line); bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(line[bad]));
    return InvalidArgument("invalid UTF-8 at byte offset " + std::to_string(bad) +
                           " of the line (byte " + byte + "); save the file as UTF-8");
  }
  json::error_code ec;
  json::parse_options options;
  options.max_depth = 4;  // a record is one flat object; refuse deep nesting cheaply
  json::value v = json::parse(json::string_view(line.data(), line.size()), ec, {}, options);
  if (ec)
    return InvalidArgument("not valid JSON (" + ec.message() + "); " + std::string(kRecordHelp));
  if (!v.is_object())
    return InvalidArgument("a record must be a JSON object, got " +
                           std::string(json::to_string(v.kind())) + "; " +
                           std::string(kRecordHelp));
  const json::object& obj = v.as_object();
  for (const auto& kv : obj) {
    const std::string_view key(kv.key().data(), kv.key().size());
    if (key != "prompt" && key != "response" && key != "text")
      return InvalidArgument("unknown key " + quoted(key) + "; " + std::string(kRecordHelp));
  }
  // The parse keeps the last of two equal keys. Only the record's own keys, all known by now,
  // are named ("text.a" would be inside a value that is refused for not being a string).
  if (const std::string duplicate = first_duplicate_key(line);
      !duplicate.empty() && duplicate.find('.') == std::string::npos)
    return InvalidArgument("key " + quoted(duplicate) +
                           " appears twice; give each key once per record");
  Document d;
  d.genre_name = "jsonl";
  if (obj.contains("text")) {
    if (obj.contains("prompt") || obj.contains("response"))
      return InvalidArgument("\"text\" cannot be combined with \"prompt\"/\"response\"; " +
                             std::string(kRecordHelp));
    ATOLL_ASSIGN_OR_RETURN(d.text, string_field(obj, "text"));
    if (d.text.empty()) return InvalidArgument("\"text\" is empty");
    return d;
  }
  if (!obj.contains("prompt") && !obj.contains("response"))
    return InvalidArgument("no \"text\" or \"prompt\"/\"response\"; " + std::string(kRecordHelp));
  ATOLL_ASSIGN_OR_RETURN(std::string prompt, string_field(obj, "prompt"));
  ATOLL_ASSIGN_OR_RETURN(std::string response, string_field(obj, "response"));
  if (response.empty()) return InvalidArgument("\"response\" is empty: nothing to train on");
  d.prompt_bytes = prompt.size();
  d.text = std::move(prompt) + response;
  return d;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

StatusOr<std::vector<Document>> parse_jsonl_records(std::string_view contents,
                                                    std::string_view file_name) {
  // Names use the file's base name, so the split by name does not depend on where it lives.
  const std::string_view base = file_name.substr(file_name.find_last_of('/') + 1);
  std::vector<Document> docs;
  size_t line_number = 0;
  // A byte order mark, which editors on Windows write first, is no part of the first record.
  const size_t first = contents.starts_with(kUtf8ByteOrderMark) ? kUtf8ByteOrderMark.size() : 0;
  for (size_t begin = first; begin < contents.size();) {
    size_t end = contents.find('\n', begin);
    if (end == std::string_view::npos) end = contents.size();
    const std::string_view line = contents.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (is_blank(line)) continue;
    auto record = parse_record(line);
    if (!record.ok())
      return InvalidArgument(std::string(file_name) + " line " + std::to_string(line_number) +
                             ": " + record.status().message());
    record->name = std::string(base) + ":" + std::to_string(line_number);
    docs.push_back(std::move(*record));
  }
  if (docs.empty())
    return InvalidArgument(std::string(file_name) + " holds no records; " +
                           std::string(kRecordHelp));
  return docs;
}

}  // namespace atl::algorithms::data
