//===- Expected.h - a value or a one-line error message -----------*- C++ -*-===//
//
// The one result type of tpc, shared by the runtime, the GGUF library and the compiler (which is built
// with -fno-exceptions, so failures travel as values). The message is already user-facing: it names the
// file, tensor, flag or device and says what to do; callers print it as is or prefix it.
//
// Usage:
//   Expected<uint32_t> n = file.getU32("llama.block_count");
//   if (!n) return Error{"model.gguf: " + n.message()};
//   use(*n);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_SUPPORT_EXPECTED_H
#define TPC_RUNTIME_SUPPORT_EXPECTED_H

#include <optional>
#include <string>
#include <utility>

namespace tpc {

/// An error message; constructs a failed Expected: `return Error{"model.gguf: ..."};`.
struct Error {
  std::string message;
};

/// A value of type T or an error message. Reading the value of a failed Expected is a programming error
/// (trapped, since exceptions may be disabled).
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Error error) : message_(std::move(error.message)) {}

  /// True when a value is present.
  explicit operator bool() const { return value_.has_value(); }
  /// The error message (empty when a value is present).
  const std::string &message() const { return message_; }

  T &operator*() { return get(); }
  const T &operator*() const { return get(); }
  T *operator->() { return &get(); }
  const T *operator->() const { return &get(); }
  /// Moves the value out.
  T take() { return std::move(get()); }

private:
  T &get() {
    if (!value_)
      __builtin_trap();
    return *value_;
  }
  const T &get() const {
    if (!value_)
      __builtin_trap();
    return *value_;
  }
  std::optional<T> value_;
  std::string message_;
};

/// Success or an error message, for operations with no result.
template <> class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error error) : ok_(false), message_(std::move(error.message)) {}

  explicit operator bool() const { return ok_; }
  const std::string &message() const { return message_; }

private:
  bool ok_ = true;
  std::string message_;
};

} // namespace tpc

#endif // TPC_RUNTIME_SUPPORT_EXPECTED_H
