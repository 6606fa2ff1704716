//===- PlanIO.h - reading and writing plan files ------------------*- C++ -*-===//
//
// serializePlan() writes the magic "TPCPLAN1" followed by a FlatBuffer (plan.fbs); loadPlan() reads a file
// as untrusted input: magic, FlatBuffers verifier, schema version, then validatePlan()'s semantic checks.
// ggufFingerprint() is the function the compiler stores in the plan and the runtime recomputes to notice a
// GGUF that changed since compilation; it reads the header region and 16 samples of 64 KiB, so it is fast
// even for a 30 GB file. The runtime does not depend on compiler/, so the small Expected lives here.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_PLAN_PLANIO_H
#define TPC_RUNTIME_PLAN_PLANIO_H

#include "runtime/plan/PlanFormat.h"

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tpc::rt {

/// A value or a one-line error message.
template <typename T> class Expected {
public:
  Expected(T value) : v_(std::move(value)) {}
  /// An error (use Expected<T>::error("...")).
  static Expected error(std::string msg) { return Expected(Err{std::move(msg)}); }
  explicit operator bool() const { return v_.index() == 0; }
  T &operator*() { return std::get<0>(v_); }
  const T &operator*() const { return std::get<0>(v_); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  /// The message; only when !*this.
  const std::string &message() const { return std::get<1>(v_).msg; }

private:
  struct Err {
    std::string msg;
  };
  explicit Expected(Err e) : v_(std::move(e)) {}
  std::variant<T, Err> v_;
};

/// The plan file bytes: magic + FlatBuffer.
std::vector<uint8_t> serializePlan(const Plan &plan);
/// Writes serializePlan(plan) to `path`; an error message names the path.
Expected<bool> writePlan(const Plan &plan, const std::string &path);
/// Parses and validates plan bytes; `what` names the source in errors.
Expected<Plan> parsePlan(const uint8_t *data, size_t size, const std::string &what = "plan");
/// Reads, parses and validates a plan file (does not look at the GGUF; see checkPlanGguf()).
Expected<Plan> loadPlan(const std::string &path);

/// 64-bit fingerprint of a GGUF: hash of its size, its header + metadata + tensor-info region and 64 KiB
/// sampled at 16 evenly spaced offsets of the data region. Errors name the path.
Expected<uint64_t> ggufFingerprint(const std::string &path);
/// Checks that `ggufPath` (or the plan's own path when empty) still is the file the plan was compiled
/// from: exists, same size, same fingerprint. Returns the path actually checked.
Expected<std::string> checkPlanGguf(const Plan &plan, const std::string &ggufPath = "");

} // namespace tpc::rt

#endif // TPC_RUNTIME_PLAN_PLANIO_H
