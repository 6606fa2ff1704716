//===- Expected.h - value-or-error result for the GGUF library ----*- C++ -*-===//
//
// A small `Expected<T>`: either a value or a one-line error message. The GGUF reader is called from MLIR
// importers built with -fno-exceptions, so failures travel as values, never as exceptions. The message is
// already user-facing (it names the file, byte offset and field); callers print it as is or prefix it.
//
// Usage:
//   Expected<uint32_t> n = file.getU32("llama.block_count");
//   if (!n) return fail(n.error());
//   use(*n);
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_GGUF_EXPECTED_H
#define TPC_COMPILER_GGUF_EXPECTED_H

#include <optional>
#include <string>
#include <utility>

namespace tpc::gguf {

/// An error message, used to construct a failed Expected: `return Error{"model.gguf: ..."};`.
struct Error {
  std::string message;
};

/// A value of type T or an error message. Accessing the value of a failed Expected is a programming
/// error (checked with __builtin_trap, since exceptions may be disabled).
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Error error) : error_(std::move(error.message)) {}

  /// True when a value is present.
  explicit operator bool() const { return value_.has_value(); }
  /// The error message (empty when a value is present).
  const std::string &error() const { return error_; }

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
  std::string error_;
};

/// Success or an error message, for operations with no result.
template <> class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error error) : ok_(false), error_(std::move(error.message)) {}

  explicit operator bool() const { return ok_; }
  const std::string &error() const { return error_; }

private:
  bool ok_ = true;
  std::string error_;
};

} // namespace tpc::gguf

#endif // TPC_COMPILER_GGUF_EXPECTED_H
