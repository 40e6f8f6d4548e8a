// How `atoll coordinator` and `atoll node` print their lines: as text (the default, unchanged)
// or, with `--log-format json`, one JSON object per line for log collectors:
//
//   {"time":"2026-12-01T09:30:12.345Z","level":"info","component":"coordinator",
//    "experiment":"itest","round":3,"message":"round 3 committed | loss 4.1234 | ..."}
//
// time: RFC 3339, UTC, milliseconds; level: "info", "warn" or "error"; component:
// "coordinator" or "node"; node: the node's name (nodes only); experiment: "" until known;
// round: present when known; message: the text line (without the node's "[name] " prefix). Each
// line goes to the stream its text would go to (stdout, or stderr for errors) in one write, so
// lines of several threads never interleave.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::cli {

// printf into a std::string.
std::string format_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

enum class LogFormat { kText, kJson };
enum class LogLevel { kInfo, kWarn, kError };

// "text" or "json" (InvalidArgument naming --log-format otherwise).
StatusOr<LogFormat> parse_log_format(std::string_view value);
const char* log_level_name(LogLevel level);  // "info", "warn", "error"

// 2026-12-01T09:30:12.345Z
std::string rfc3339_utc_ms(std::chrono::system_clock::time_point t);

struct LogRecord {
  std::chrono::system_clock::time_point time;
  LogLevel level = LogLevel::kInfo;
  std::string_view component;
  std::string_view node;  // omitted when empty
  std::string_view experiment;
  std::optional<uint64_t> round;
  std::string_view message;
};
// The record as one JSON object, without the newline.
std::string json_log_line(const LogRecord& record);

class LogOutput {
 public:
  // `node` (a node's name) starts every text line as "[node] " and is a field of JSON lines.
  LogOutput(LogFormat format, std::string component, std::string node = "");

  LogFormat format() const { return format_; }
  // Where the experiment and the current round come from when a line does not give its round
  // (read for every line; may be left empty).
  void set_context(std::function<std::string()> experiment,
                   std::function<std::optional<uint64_t>()> round);

  // One line on `stream` (text: prefix + message).
  void write(LogLevel level, std::string_view message, std::optional<uint64_t> round = {},
             std::FILE* stream = stdout);
  void info(std::string_view message, std::optional<uint64_t> round = {}) {
    write(LogLevel::kInfo, message, round);
  }
  // A failure the command stops on, on stderr; text: "atoll <component>: <message>", as the
  // commands' failures print. Returns `code`, for `return log.fail(...)`.
  int fail(std::string_view message, int code = 1);

 private:
  void emit(std::FILE* out, LogLevel level, std::string_view text_line, std::string_view message,
            std::optional<uint64_t> round);

  const LogFormat format_;
  const std::string component_;
  const std::string node_;
  const std::string prefix_;
  std::function<std::string()> experiment_;
  std::function<std::optional<uint64_t>()> round_;
  std::mutex mu_;
};

}  // namespace atl::cli
