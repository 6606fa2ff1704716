//===- CudaBackend.cpp - the CUDA Backend object ----------------------------===//
//
// The mapping from the backend-neutral SessionOptions to CudaOptions lives here (it moved out of `tpc
// run`), so every program that opens "cuda" through a registry gets the same options.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaBackend.h"

#include "runtime/cuda/CudaSession.h"

#include <fmt/core.h>

#include <cstdlib>

namespace tpc::rt::cuda {

namespace {
class CudaBackend final : public Backend {
public:
  explicit CudaBackend(const Backend &hostCpu) : hostCpu_(hostCpu) {}
  std::string name() const override { return "cuda"; }
  Expected<void> usable() const override {
    if (cudaDeviceCount() == 0)
      return Error{"no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES)"};
    return {};
  }
  Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts) const override {
    if (plan.stages > 1) // Send/Recv steps have no CUDA path yet
      return Error{fmt::format("the plan has {} pipeline stages; the CUDA backend runs one-stage plans only "
                               "(use --backend cpu, or compile without --stages)",
                               plan.stages)};
    CudaOptions co;
    co.gpus = opts.ordinals;
    co.progress = opts.progress;
    co.fuse = !std::getenv("TPC_CUDA_NO_FUSE");     // A/B benchmarks of the fused kernels
    co.graphs = !std::getenv("TPC_CUDA_NO_GRAPHS"); // A/B runs: every decode step launched kernel by kernel
    return openCudaSession(std::move(plan), opts, co, hostCpu_);
  }

private:
  const Backend &hostCpu_;
};
} // namespace

std::unique_ptr<Backend> makeCudaBackend(const Backend &hostCpu) {
  return std::make_unique<CudaBackend>(hostCpu);
}

} // namespace tpc::rt::cuda
