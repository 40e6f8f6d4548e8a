#include "cli/log_output.h"

#include <boost/json.hpp>
#include <cstdarg>
#include <ctime>

namespace atl::cli {

std::string format_line(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

StatusOr<LogFormat> parse_log_format(std::string_view value) {
  if (value == "text") return LogFormat::kText;
  if (value == "json") return LogFormat::kJson;
  return InvalidArgument("--log-format " + std::string(value.substr(0, 32)) +
                         ": expected text or json");
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

std::string rfc3339_utc_ms(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000 - (ms.count() % 1000 < 0));
  const int64_t frac = ((ms.count() % 1000) + 1000) % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];  // 24 characters; room for what -Wformat-truncation cannot rule out
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(frac));
  return buf;
}

std::string json_log_line(const LogRecord& r) {
  // Boost.JSON keeps the insertion order and escapes the strings (control characters as \uXXXX).
  boost::json::object o;
  o["time"] = rfc3339_utc_ms(r.time);
  o["level"] = log_level_name(r.level);
  o["component"] = r.component;
  if (!r.node.empty()) o["node"] = r.node;
  o["experiment"] = r.experiment;
  if (r.round) o["round"] = *r.round;
  o["message"] = r.message;
  return boost::json::serialize(o);
}

LogOutput::LogOutput(LogFormat format, std::string component, std::string node)
    : format_(format),
      component_(std::move(component)),
      node_(std::move(node)),
      prefix_(node_.empty() ? "" : "[" + node_ + "] ") {}

void LogOutput::set_context(std::function<std::string()> experiment,
                            std::function<std::optional<uint64_t>()> round) {
  std::lock_guard<std::mutex> lk(mu_);
  experiment_ = std::move(experiment);
  round_ = std::move(round);
}

void LogOutput::write(LogLevel level, std::string_view message, std::optional<uint64_t> round,
                      std::FILE* stream) {
  emit(stream, level, prefix_ + std::string(message), message, round);
}

int LogOutput::fail(std::string_view message, int code) {
  emit(stderr, LogLevel::kError, "atoll " + component_ + ": " + std::string(message), message,
       std::nullopt);
  return code;
}

void LogOutput::emit(std::FILE* out, LogLevel level, std::string_view text_line,
                     std::string_view message, std::optional<uint64_t> round) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string line;
  if (format_ == LogFormat::kText) {
    line = std::string(text_line);
  } else {
    const std::string experiment = experiment_ ? experiment_() : "";
    if (!round && round_) round = round_();
    line = json_log_line(
        {std::chrono::system_clock::now(), level, component_, node_, experiment, round, message});
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace atl::cli
