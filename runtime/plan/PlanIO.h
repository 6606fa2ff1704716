//===- PlanIO.h - reading and writing plan files ------------------*- C++ -*-===//
//
// serializePlan() writes the magic "TPCPLAN1" followed by a FlatBuffer (plan.fbs); loadPlan() reads a file
// as untrusted input: magic, FlatBuffers verifier, schema version, then validatePlan()'s semantic checks.
// ggufFingerprint() is the function the compiler stores in the plan and the runtime recomputes to notice a
// GGUF that changed since compilation; it reads the header region and 16 samples of 64 KiB, so it is fast
// even for a 30 GB file. Results are tpc::Expected (runtime/support), the one result type of runtime and compiler.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_PLAN_PLANIO_H
#define TPC_RUNTIME_PLAN_PLANIO_H

#include "runtime/plan/PlanFormat.h"
#include "runtime/support/Expected.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpc::rt {

using tpc::Error;
using tpc::Expected;

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
