#include "algorithms/data/json_duplicates.h"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>  // basic_parser<Handler> member definitions
#include <set>
#include <vector>

namespace atl::algorithms {
namespace {

namespace json = boost::json;

// SAX pass that stops at the first key seen twice in the same object.
struct DuplicateKeyHandler {
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  struct OpenObject {
    std::set<std::string> keys;  // seen so far
    std::string current;         // the key whose value is being read (for the path)
  };
  // Open objects from the root; an array in between adds none (its objects are named by the
  // array's key).
  std::vector<OpenObject> objects;
  std::string key;        // key being assembled from parts
  std::string duplicate;  // path of the first duplicate found

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t, json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    objects.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t, json::error_code&) {
    objects.pop_back();
    return true;
  }
  bool on_string_part(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_string(json::string_view, std::size_t, json::error_code&) { return true; }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    key.append(s.data(), s.size());
    if (!objects.back().keys.insert(key).second) {
      for (size_t i = 0; i + 1 < objects.size(); ++i) duplicate += objects[i].current + ".";
      duplicate += key;
      ec = json::error::syntax;
      return false;
    }
    objects.back().current = std::move(key);
    key.clear();
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(int64_t, json::string_view, json::error_code&) { return true; }
  bool on_uint64(uint64_t, json::string_view, json::error_code&) { return true; }
  bool on_double(double, json::string_view, json::error_code&) { return true; }
  bool on_bool(bool, json::error_code&) { return true; }
  bool on_null(json::error_code&) { return true; }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

}  // namespace

std::string first_duplicate_key(std::string_view text) {
  json::basic_parser<DuplicateKeyHandler> parser(json::parse_options{});
  json::error_code ec;
  parser.write_some(false, text.data(), text.size(), ec);
  return parser.handler().duplicate;
}

}  // namespace atl::algorithms
