//===- SharedReduceNorm.h - all-reduce + RMS norm by rows among in-process devices -*- C++ -*-===//
//
// The plan's AllReduceRmsNorm composed from the communicator (CollectiveRunner) costs each device a pass of
// the whole tensor per part: device 0 adds the residual, the other copies, the all-reduce reads and writes
// every row on every device, then every device normalizes every row. At a 512-token prompt of Gemma 3 270M
// on two devices (one thread each) that is ~10 MB of memory traffic per call and 6-10 % of the prefill.
// Where all devices run in this process, each device instead takes a share of the rows: it sums them over
// every device's addend, in the composition's order (device 0's addend with the residual joined, then
// devices 1, 2, ... : the same bits), normalizes each row with the CPU kernel, and writes y and the norm
// into every device's outputs: ~4.5 MB per device. Two barriers: every addend is ready before anyone
// reads, and every row is written before anyone goes on. With bf16 payloads (the communicator's payload())
// a row is the bf16 composition's instead: the addends rounded as the wire rounds them, summed in rank
// order, the sum rounded, then the residual added (runtime/comm/Bf16Wire.h; the same bits as every other
// path). Below kMinRows (decode) the composition's small
// all-reduce (one barrier) stays.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_SHAREDREDUCENORM_H
#define TPC_RUNTIME_CPU_SHAREDREDUCENORM_H

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/exec/Tensor.h"
#include "runtime/plan/PlanFormat.h"
#include "runtime/plan/StepParams.h"

#include <cstdint>
#include <vector>

namespace tpc::rt::cpu {

class SharedReduceNorm {
public:
  /// Rows from which a call takes the shared path.
  static constexpr int64_t kMinRows = 16;

  SharedReduceNorm(comm::Communicator &comm, int devices) : comm_(comm), slots_(static_cast<size_t>(devices)) {}

  /// True when the operands of one device's step (in: x [, r] [, w]; out: y, n) are safe for the shared
  /// path at every token count up to `maxRows`: y and n overlap neither each other nor x or r, except as
  /// the very same bytes (rows are read before they are written, and only by their owner).
  static bool operandsSafe(const std::vector<exec::TensorRef> &in, const std::vector<exec::TensorRef> &out,
                           const AllReduceRmsNormParams &p);

  /// Per step of `dp`: an AllReduceRmsNorm step of `shared` (nonzero: the steps this class runs) whose sum
  /// (outputs[0]) is read, before anything writes it again, only as the residual of later shared steps.
  /// Each device of a shared step sums the same rows (its share of the call's rows, equal in every shared
  /// step of a call) and reads only those rows of its residual, so the peers need not write this device's
  /// copy of the other rows: a third of the step's remote writes, 3-5 % of a 2-device MoE prefill
  /// (docs/performance.md). A sum nothing reads stays whole (tests and debugging dumps read tensors after
  /// a call).
  static std::vector<char> ownRowsSuffice(const DevicePlan &dp, const std::vector<char> &shared);

  /// Device `rank`'s part of the step (every device of the world calls it for the same step). `wholeSum`:
  /// this device needs every row of the sum y; false when it reads y only as the residual of later shared
  /// steps, which read the rows this device sums itself: the peers then write only the norm's rows into it.
  Expected<void> run(int rank, const std::vector<exec::TensorRef> &in, const std::vector<exec::TensorRef> &out,
                     const AllReduceRmsNormParams &p, ThreadGroup &tg, bool wholeSum = true);

private:
  struct Slot {
    const float *x = nullptr, *r = nullptr;
    float *y = nullptr, *n = nullptr;
    int64_t rows = 0, cols = 0;
    bool wholeSum = true;
  };
  comm::Communicator &comm_;
  std::vector<Slot> slots_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_SHAREDREDUCENORM_H
