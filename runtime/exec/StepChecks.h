//===- StepChecks.h - what every backend checks before running a plan -*- C++ -*-===//
//
// The kernels do not check their operands (a decode step is too short for it), so every backend runs these
// when a session opens (prepareOpen, Setup.h, runs them all): each step's operands must fit its op for 1
// and max_batch tokens, and the k-th collective of every device must agree with the others'. The checks
// look at shapes, dtypes and parameters only, so they run before anything is allocated. A backend adds
// its own (the weight types its kernels take) after these. Errors are one line naming the step.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_STEPCHECKS_H
#define TPC_RUNTIME_EXEC_STEPCHECKS_H

#include "runtime/exec/Tensor.h"

#include <string>
#include <vector>

namespace tpc::rt::exec {

/// Checks that a step's bound operands fit its op (shapes, dtypes, parameters); "" when fine. `kv` are
/// the device plan's caches (Attention's k/v must match the one it names).
std::string checkStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      const std::vector<KvCache> &kv);

/// checkStep for every step of device `d` at `t` tokens and `rows` output rows: "" or "device d step s
/// 'name' (t tokens): ...".
std::string checkDeviceSteps(const Plan &plan, size_t d, int64_t t, int64_t rows);

/// The k-th collective of every device must agree with device 0's at `t` tokens: op, parameters, tensor
/// count, equal sizes for all-reduces, and for gather/scatter parts that add up to one whole along the axis.
/// Shapes come from the plan, so a process that runs one device checks all of them. "" when fine.
std::string checkCollectives(const Plan &plan, int64_t t, int64_t rows);

/// The call sizes checkStep must accept for `plan`: (1 token, 1 row) and (max_batch tokens, max rows),
/// where max rows is max_output_rows, or max_batch for a plan without the rows input (its rows dims, if
/// any, are then validated away). The shape checks are linear in both, so the extremes cover every call.
std::vector<std::pair<int64_t, int64_t>> checkedCallSizes(const Plan &plan);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_STEPCHECKS_H
