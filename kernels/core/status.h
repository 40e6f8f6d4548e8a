// Errors are values (RocksDB/Abseil style): no exceptions cross a module boundary.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace atl {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, config, file content, network message
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,  // e.g. stale round, wrong experiment state
  kOutOfRange,
  kPermissionDenied,
  kUnauthenticated,
  kUnavailable,  // peer unreachable, try again
  kDeadlineExceeded,
  kDataLoss,  // checksum mismatch, truncated file
  kInternal,
  kIoError,
  kAborted,  // this caller was superseded (another process took over its identity): stop
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" — one line for users.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Aborted(std::string m) {
  return {StatusCode::kAborted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }

namespace detail {
// StatusOr's failure paths, out of line so that the checks cost one branch where they inline.
[[noreturn]] void statusor_value_of_error(const Status& status);
Status statusor_error_from(Status status);
}  // namespace detail

// A value or an error, never neither: a StatusOr made from an OK Status holds the INTERNAL
// error "StatusOr made from an OK Status without a value" (else ATOLL_ASSIGN_OR_RETURN would
// return OK from the middle of a function). Reading the value of an error (value(), *, ->)
// prints the error and aborts, in every build type: check ok() first.
template <typename T>
class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>,
                "StatusOr<Status> is ambiguous: return a Status");
  static_assert(!std::is_reference_v<T>, "StatusOr<T&>: hold a pointer instead");

 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status)                          // NOLINT: implicit by design
      : status_(detail::statusor_error_from(std::move(status))) {}
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    check_value();
    return *value_;
  }
  const T& value() const& {
    check_value();
    return *value_;
  }
  T&& value() && {
    check_value();
    return std::move(*value_);
  }
  T* operator->() { return std::addressof(value()); }
  const T* operator->() const { return std::addressof(value()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check_value() const {
    if (!value_.has_value()) detail::statusor_value_of_error(status_);
  }

  Status status_;
  std::optional<T> value_;
};

#define ATOLL_CONCAT_INNER(a, b) a##b
#define ATOLL_CONCAT(a, b) ATOLL_CONCAT_INNER(a, b)
#define ATOLL_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::atl::Status _st = (expr);            \
    if (!_st.ok()) return _st;               \
  } while (0)
#define ATOLL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
#define ATOLL_ASSIGN_OR_RETURN(lhs, expr) \
  ATOLL_ASSIGN_OR_RETURN_IMPL(ATOLL_CONCAT(_statusor_, __LINE__), lhs, expr)

}  // namespace atl
