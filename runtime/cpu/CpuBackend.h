//===- CpuBackend.h - the CPU backend and its host-step runner ----*- C++ -*-===//
//
// makeCpuBackend() is what a registry adds (runtime/backends): it opens CPU sessions (CpuSession.h) and
// hands out CpuStepRunners, the exec::HostStepRunner an accelerator backend runs its host-placed steps
// through. The CPU session runs its own non-collective steps through the same runner, so a host step on a
// GPU backend gives the CPU backend's bits. A runner can keep converted matmul inputs (ActivationCache);
// only a caller that reports every write to the memory its steps read may turn that on (the CPU session
// does: all of a device's writes are its own steps and collectives), so it is off by default.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_CPUBACKEND_H
#define TPC_RUNTIME_CPU_CPUBACKEND_H

#include "runtime/cpu/ActivationCache.h"
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/HostStepRunner.h"

#include <memory>

namespace tpc::rt::cpu {

/// The CPU backend ("cpu"): always usable.
std::unique_ptr<Backend> makeCpuBackend();

/// Runs single steps with the CPU kernels (cpu::runLocalStep) on a thread group of its own.
class CpuStepRunner final : public exec::HostStepRunner {
public:
  /// `threads` >= 1 worker threads, the caller included.
  explicit CpuStepRunner(int threads) : tg_(threads) {}
  int threads() const override { return tg_.size(); }
  Expected<void> run(const Step &s, const std::vector<exec::TensorRef> &in,
                     const std::vector<exec::TensorRef> &out, std::vector<exec::KvBuffers> &kv) override;
  /// Runs steps that matmulBatchEnds grouped (consecutive Matmuls, or MulMatIds, on one input) as one job;
  /// in[i] / out[i] are step i's bound operands. With `fused` (a GLU step that gateUpGluSteps paired with
  /// these steps, or an EXPERT_COMBINE that downCombineSteps paired with a lone MulMatId) that step runs
  /// fused, reading fusedIn (its bound inputs) and writing fusedOut; the steps' own outputs are not written.
  Expected<void> runBatch(const std::vector<const Step *> &steps, const std::vector<std::vector<exec::TensorRef>> &in,
                          const std::vector<std::vector<exec::TensorRef>> &out, const Step *fused = nullptr,
                          const std::vector<exec::TensorRef> *fusedIn = nullptr,
                          const exec::TensorRef *fusedOut = nullptr);
  /// The thread group the steps run on (the CPU session's collective kernels and weight copies use it too).
  ThreadGroup &threadGroup() { return tg_; }

  /// Keeps converted matmul inputs between steps from now on. The caller promises to report every write to
  /// memory a step may read that does not go through run() (noteWrites) and to call forgetInputs() when the
  /// inputs change wholesale (a new call); run() itself reports its steps' outputs.
  void enableActivationCache() { cacheOn_ = true; }
  /// Drops the converted inputs that overlap any of `written`.
  void noteWrites(const std::vector<exec::TensorRef> &written);
  /// Drops every converted input.
  void forgetInputs() { cache_.clear(); }
  /// Matmuls run as the float32 reference from now on (SessionOptions::f32Reference).
  void setF32Reference(bool on) { f32Reference_ = on; }
  /// The converted-input cache (its counters tell tests how often inputs were converted).
  const ActivationCache &activationCache() const { return cache_; }

private:
  ThreadGroup tg_;
  ActivationCache cache_;
  bool cacheOn_ = false;
  bool f32Reference_ = false;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_CPUBACKEND_H
