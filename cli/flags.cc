#include "cli/flags.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "kernels/core/number_text.h"
#include "transport/host_port.h"

namespace atl::cli {

Flags::Flags(std::string command, std::vector<FlagSpec> specs)
    : command_(std::move(command)), specs_(std::move(specs)) {}

const FlagSpec* Flags::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

Status Flags::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      if (positional_.size() >= max_positional_)
        return InvalidArgument("unexpected argument '" + a + "' for `atoll " + command_ +
                               "` (a value with spaces needs quotes; see `atoll " + command_ +
                               " --help`)");
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find(name);
    if (!spec) {
      return InvalidArgument("unknown flag --" + name + " for `atoll " + command_ +
                             "` (see `atoll " + command_ + " --help`)");
    }
    if (!spec->refused_because.empty()) return InvalidArgument(spec->refused_because);
    if (spec->takes_value) {
      if (!inline_value) {
        if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
          return InvalidArgument("flag --" + name + " needs a value (e.g. --" + name + " " +
                                 (spec->default_text.empty() ? "VALUE" : spec->default_text) +
                                 ")");
        }
        value = args[++i];
      }
    } else if (inline_value) {
      return InvalidArgument("flag --" + name + " takes no value (write just --" + name + ")");
    }
    if (values_.count(name)) {
      return InvalidArgument("flag --" + name + " given twice; give it once");
    }
    values_[name] = value;
  }
  return Status::Ok();
}

void refuse_flag(std::vector<FlagSpec>& specs, const std::string& name, const std::string& why) {
  for (FlagSpec& f : specs)
    if (f.name == name) f.refused_because = why;
}

std::string Flags::usage() const {
  std::string s = "usage: atoll " + command_ + " [flags]\n";
  for (const auto& f : specs_) {
    if (!f.refused_because.empty()) continue;
    std::string left = "  --" + f.name + (f.takes_value ? " VALUE" : "");
    if (left.size() < 28) left.resize(28, ' ');
    s += left + " " + f.help;
    if (!f.default_text.empty()) s += " (default " + f.default_text + ")";
    s += "\n";
  }
  return s;
}

std::vector<std::string> Flags::given() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : values_) names.push_back(name);
  return names;
}

std::string Flags::retyped(const std::set<std::string>& leave_out) const {
  // Single quotes keep every byte but the quote itself, written '\''.
  auto quoted = [](const std::string& v) {
    if (!v.empty() && v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-.,:/=+@%") == std::string::npos)
      return v;
    std::string q = "'";
    for (char c : v) {
      if (c == '\'')
        q.append("'\\''");
      else
        q.push_back(c);
    }
    q.push_back('\'');
    return q;
  };
  std::string line;
  for (const auto& [name, value] : values_) {
    if (leave_out.count(name)) continue;
    if (!line.empty()) line += ' ';
    line.append("--").append(name);
    const FlagSpec* spec = find(name);
    if (spec && spec->takes_value) line.append(" ").append(quoted(value));
  }
  return line;
}

bool Flags::has(const std::string& name) const { return values_.count(name) > 0; }

std::optional<std::string> Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::get_or(const std::string& name, const std::string& def) const {
  auto v = get(name);
  return v ? *v : def;
}

Status check_listen_flag(const Flags& flags, const std::string& name, bool off) {
  const auto value = flags.get(name);
  if (!value || (off && *value == "off")) return Status::Ok();
  if (off && value->empty())
    return InvalidArgument("--" + name + " is empty: give HOST:PORT, or off for none");
  // The listeners' own examples (transport/metrics/http_exporter.cc, coordinator/http/server.cc),
  // so that a flag's line is the same whichever checks it first.
  const std::string example = name == "metrics" ? "10.0.0.5:9464"
                              : name == "http"  ? "127.0.0.1:8443"
                                                : "127.0.0.1:7070";
  return transport::parse_host_port(*value, "--" + name, transport::PortZero::kAllowed, example)
      .status();
}

StatusOr<int64_t> parse_int(const std::string& text, const std::string& what) {
  if (text.empty()) return InvalidArgument(what + " is empty; give an integer");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno || *end != '\0') return InvalidArgument(what + " = '" + text + "' is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<double> parse_double(const std::string& text, const std::string& what) {
  if (text.empty()) return InvalidArgument(what + " is empty; give a number");
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno || *end != '\0' || !std::isfinite(v))
    return InvalidArgument(what + " = '" + text + "' is not a finite number");
  return v;
}

StatusOr<int64_t> Flags::get_int(const std::string& name, int64_t def, int64_t min,
                                 int64_t max) const {
  auto v = get(name);
  if (!v) return def;
  ATOLL_ASSIGN_OR_RETURN(int64_t x, parse_int(*v, "--" + name));
  if (x < min || x > max)
    return InvalidArgument("--" + name + " " + *v + " is out of range [" + std::to_string(min) +
                           ", " + std::to_string(max) + "]");
  return x;
}

StatusOr<std::optional<std::string>> Flags::get_output_file(const std::string& name) const {
  std::optional<std::string> path = get(name);
  if (!path) return path;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(*path, ec))
    return InvalidArgument("--" + name + " " + *path + " is a folder; give a file path");
  const fs::path parent = fs::path(*path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(folder, ec))
    return InvalidArgument("--" + name + " " + *path + ": the folder " + folder +
                           " does not exist; create it first");
  if (::access(folder.c_str(), W_OK) != 0)
    return InvalidArgument("--" + name + " " + *path + ": the folder " + folder +
                           " is not writable");
  return path;
}

namespace {

}  // namespace

StatusOr<double> Flags::get_double(const std::string& name, double def, double min, double max,
                                   bool min_open) const {
  auto v = get(name);
  if (!v) return def;
  ATOLL_ASSIGN_OR_RETURN(double x, parse_double(*v, "--" + name));
  if (x < min || (min_open && x == min) || x > max)
    return InvalidArgument("--" + name + " " + *v + " is out of range " + (min_open ? "(" : "[") +
                           shortest_decimal(min) + ", " + shortest_decimal(max) + "]");
  return x;
}

}  // namespace atl::cli
