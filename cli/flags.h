// A small flag parser for `atoll <command> [--flag value] [--switch]`. Every mistake becomes one
// line that names the flag and says how to fix it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/status.h"

namespace atl::cli {

struct FlagSpec {
  FlagSpec(std::string name, bool takes_value, std::string help, std::string default_text)
      : name(std::move(name)),
        takes_value(takes_value),
        help(std::move(help)),
        default_text(std::move(default_text)) {}

  std::string name;     // without dashes, e.g. "threads"
  bool takes_value = true;
  std::string help;
  std::string default_text;  // shown in --help
  // Non-empty: a flag the command shares with its siblings but cannot take (--insecure with
  // in-process sites). --help leaves it out; given, it is refused with this line.
  std::string refused_because;
};

// Marks `name` in `specs` as refused with `why` (FlagSpec::refused_because).
void refuse_flag(std::vector<FlagSpec>& specs, const std::string& name, const std::string& why);

// The one line for --insecure where the sites run in this process.
inline constexpr const char* kInsecureInProcess =
    "--insecure has no meaning here: in-process sites use no network";

class Flags {
 public:
  Flags(std::string command, std::vector<FlagSpec> specs);
  // Parses argv (after the command words). Positional arguments are collected in order, up to
  // the number allow_positional() allows (none by default); one more is an error naming it, so
  // that a stray word (`--steps 5 6`, `--prompt a b`) is not silently ignored.
  Status parse(const std::vector<std::string>& args);
  void allow_positional(size_t n) { max_positional_ = n; }
  bool help_requested() const { return help_; }
  std::string usage() const;

  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& def) const;
  // Typed getters: an unparsable or out-of-range value is an InvalidArgument naming the flag.
  StatusOr<int64_t> get_int(const std::string& name, int64_t def, int64_t min, int64_t max) const;
  // get_double's range is [min, max]; with min_open, (min, max]: min itself is refused (e.g. a
  // scale that must be positive). Messages print the bounds exactly, with the ends' brackets.
  StatusOr<double> get_double(const std::string& name, double def, double min, double max,
                              bool min_open = false) const;
  // A file the command writes when its work is done (--out, --summary-json), checked before the
  // work starts: its folder must exist and be writable, and the path must not be a folder.
  StatusOr<std::optional<std::string>> get_output_file(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The names of the flags given (not the defaults), in name order.
  std::vector<std::string> given() const;
  // The flags given, as they would be typed again ("--batch 2 --data 'brown:a b'"), in name
  // order, without those named in `leave_out`.
  std::string retyped(const std::set<std::string>& leave_out) const;
  const std::string& command() const { return command_; }

 private:
  const FlagSpec* find(const std::string& name) const;
  std::string command_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  size_t max_positional_ = 0;
  bool help_ = false;
};

// An address flag (--listen, --bulk-listen, --http, --metrics), when given, checked as HOST:PORT
// by the parser every listener uses (transport/host_port.h); "off" passes where `off` says the
// flag has that spelling. Checked with the other flags, so that a bad address is refused before
// anything is created (an empty one used to mean "none" without saying so).
Status check_listen_flag(const Flags& flags, const std::string& name, bool off);

StatusOr<int64_t> parse_int(const std::string& text, const std::string& what);
StatusOr<double> parse_double(const std::string& text, const std::string& what);

}  // namespace atl::cli
