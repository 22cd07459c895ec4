// Error handling, channel one: failures a user can cause (a bad file, config, request).
// They are returned as Status / Result<T> with text naming what was expected and what
// was found, and never crash the program. Broken internal invariants use check.h instead.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace m2 {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context ("loading config.json: ...").
  Status& WithContext(const std::string& context) {
    if (failed_) message_ = context + ": " + message_;
    return *this;
  }

 private:
  std::string message_;
  bool failed_ = false;
};

template <typename... Args>
Status Error(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...));
}

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Status::Error("internal error: Result built from an OK status");
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace m2

#define M2_CONCAT_INNER(a, b) a##b
#define M2_CONCAT(a, b) M2_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define M2_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::m2::Status m2_status_ = (expr);       \
    if (!m2_status_.ok()) return m2_status_; \
  } while (0)

#define M2_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// `M2_ASSIGN_OR_RETURN(auto x, MakeX());`
#define M2_ASSIGN_OR_RETURN(lhs, expr) M2_ASSIGN_OR_RETURN_IMPL(M2_CONCAT(m2_result_, __LINE__), lhs, expr)
