//===- HostStepRunner.h - run one step on host memory ------------*- C++ -*-===//
//
// A plan may place steps on the host (`--override-tensor REGEX=cpu`, `--no-kv-offload`). An accelerator
// backend runs those through this interface instead of reaching into a CPU header: it asks the CPU
// Backend object for a runner (Backend::hostStepRunner) and hands it host-bound operands. The CPU backend
// implements it with its kernels, and its own session runs every non-collective step through the same
// code, so a host step gives the CPU backend's bits.
//
// Usage (a GPU session, for a host-placed step s of device d):
//   std::unique_ptr<exec::HostStepRunner> host = cpuBackend.hostStepRunner(threads);  // at open
//   exec::bindOperands(dp, ptrs, s, t, in, out);  // ptrs: resolveTensors with StorageBases::hostActs set
//   if (auto ok = host->run(s, in, out, hostKv); !ok) fail(ok.message());
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_HOSTSTEPRUNNER_H
#define TPC_RUNTIME_EXEC_HOSTSTEPRUNNER_H

#include "runtime/exec/Tensor.h"
#include "runtime/support/Expected.h"

#include <vector>

namespace tpc::rt::exec {

/// Runs single steps on operands in host memory (see the file comment). One caller at a time.
class HostStepRunner {
public:
  virtual ~HostStepRunner() = default;
  /// Worker threads the steps are split over.
  virtual int threads() const = 0;
  /// Runs step `s` on bound host operands; `kv` are the device's caches in host memory (Attention appends
  /// to the one it names). Operands must have passed checkStep. A collective (the session's own business)
  /// or a kernel failure is an error naming the step; the outputs are then undefined.
  virtual Expected<void> run(const Step &s, const std::vector<TensorRef> &in,
                             const std::vector<TensorRef> &out, std::vector<KvBuffers> &kv) = 0;
};

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_HOSTSTEPRUNNER_H
