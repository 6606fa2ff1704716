//===- CpuBackend.h - the CPU backend and its host-step runner ----*- C++ -*-===//
//
// makeCpuBackend() is what a registry adds (runtime/backends): it opens CPU sessions (CpuSession.h) and
// hands out CpuStepRunners, the exec::HostStepRunner an accelerator backend runs its host-placed steps
// through. The CPU session runs its own non-collective steps through the same runner, so a host step on a
// GPU backend gives the CPU backend's bits.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_CPUBACKEND_H
#define TPC_RUNTIME_CPU_CPUBACKEND_H

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
  /// The thread group the steps run on (the CPU session's collective kernels and weight copies use it too).
  ThreadGroup &threadGroup() { return tg_; }

private:
  ThreadGroup tg_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_CPUBACKEND_H
