#include "coordinator/http/config_json.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace atl::coordinator::http {
namespace json = boost::json;

namespace {

constexpr const char* kSource = "request";

bool bare_key(json::string_view k) {
  if (k.empty() || k.size() > 64) return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

StatusOr<std::string> scalar(const json::value& v, const std::string& key) {
  switch (v.kind()) {
    case json::kind::string:
      // Not the JSON literal: JSON leaves U+007F unescaped, which TOML forbids.
      return toml_string(v.get_string());
    case json::kind::int64:
      return std::to_string(v.get_int64());
    case json::kind::uint64:
      // The config is TOML, whose integers are signed 64-bit.
      if (v.get_uint64() > static_cast<uint64_t>(INT64_MAX))
        return InvalidArgument(
            std::string(kSource) + ": " + key + " = " + std::to_string(v.get_uint64()) +
            (key == "seed"
                 ? " must be an integer in [0, " + std::to_string(INT64_MAX) + "]"
                 : " is out of range: config integers are at most " + std::to_string(INT64_MAX)));
      return std::to_string(v.get_uint64());
    case json::kind::double_: {
      const double d = v.get_double();
      if (!std::isfinite(d))
        return InvalidArgument(std::string(kSource) + ": " + key + " must be a finite number");
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", d);
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case json::kind::bool_:
      return std::string(v.get_bool() ? "true" : "false");
    case json::kind::array: {
      std::string s = "[";
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (e.is_array() || e.is_object() || e.is_null())
          return InvalidArgument(std::string(kSource) + ": " + key +
                                 " must be an array of strings or numbers");
        ATOLL_ASSIGN_OR_RETURN(std::string x, scalar(e, key));
        if (!first) s += ", ";
        s += x;
        first = false;
      }
      return s + "]";
    }
    default:
      return InvalidArgument(std::string(kSource) + ": " + key + " has an unsupported value (" +
                             (v.is_null() ? "null" : "nested object") + ")");
  }
}

}  // namespace

StatusOr<std::string> json_to_toml(const json::object& o) {
  std::string top, tables;
  for (const auto& kv : o) {
    const std::string key(kv.key());
    if (!bare_key(kv.key()))
      return InvalidArgument(std::string(kSource) + ": invalid key \"" + key.substr(0, 64) + "\"");
    if (kv.value().is_object()) {
      tables += "\n[" + key + "]\n";
      for (const auto& kv2 : kv.value().get_object()) {
        const std::string k2(kv2.key());
        if (!bare_key(kv2.key()))
          return InvalidArgument(std::string(kSource) + ": invalid key \"" + key + "." +
                                 k2.substr(0, 64) + "\"");
        ATOLL_ASSIGN_OR_RETURN(std::string v, scalar(kv2.value(), key + "." + k2));
        tables += k2 + " = " + v + "\n";
      }
    } else {
      ATOLL_ASSIGN_OR_RETURN(std::string v, scalar(kv.value(), key));
      top += key + " = " + v + "\n";
    }
  }
  return top + tables;
}

ConfigCheck check_config_json(const json::value& v) {
  const auto refused = [](Status s) {
    ConfigCheck check;
    check.errors.push_back(std::move(s));
    return check;
  };
  if (!v.is_object()) return refused(InvalidArgument("request body must be a JSON object"));
  const json::object& o = v.get_object();
  if (const auto* t = o.if_contains("config_toml")) {
    if (!t->is_string()) return refused(InvalidArgument("request: config_toml must be a string"));
    // Named by the other field the body has (the message's first word is its field).
    for (const auto& [key, value] : o)
      if (key != "config_toml")
        return refused(InvalidArgument(std::string(kSource) + ": " +
                                       std::string(key).substr(0, 64) +
                                       " cannot be sent with config_toml: send config_toml alone "
                                       "or the config fields without it"));
    return check_experiment_config(std::string(t->get_string()), kSource);
  }
  auto toml = json_to_toml(o);
  if (!toml.ok()) return refused(toml.status());
  return check_experiment_config(*toml, kSource);
}

StatusOr<ExperimentConfig> config_from_json(const json::value& v) {
  ConfigCheck check = check_config_json(v);
  if (!check.errors.empty()) return check.errors.front();
  return std::move(check.config);
}

std::string field_of_message(const std::string& message) {
  std::string rest;
  for (const std::string& prefix : {std::string(kSource) + ": ", std::string("config: ")})
    if (message.compare(0, prefix.size(), prefix) == 0) rest = message.substr(prefix.size());
  if (rest.empty()) return "";
  for (const char* lead : {"unknown key ", "invalid key \""})
    if (rest.compare(0, std::strlen(lead), lead) == 0) rest = rest.substr(std::strlen(lead));
  size_t end = 0;
  while (end < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[end])) ||
                               rest[end] == '_' || rest[end] == '.' || rest[end] == '-'))
    ++end;
  std::string key = rest.substr(0, end);
  if (key.empty() || key.find_first_not_of("0123456789") == std::string::npos) return "";
  return key;
}

}  // namespace atl::coordinator::http
