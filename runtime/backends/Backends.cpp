//===- Backends.cpp - the built-in backend registry ------------------------===//
//
// The CUDA backend gets the CPU Backend object for its host-placed steps (Backend::hostStepRunner), so
// neither backend includes the other.
//===----------------------------------------------------------------------===//
#include "runtime/backends/Backends.h"

#include "runtime/cpu/CpuBackend.h"
#ifdef TPC_HAVE_CUDA
#include "runtime/cuda/CudaBackend.h"
#endif

namespace tpc::rt {

const BackendRegistry &builtinBackends() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    std::unique_ptr<Backend> cpu = cpu::makeCpuBackend();
#ifdef TPC_HAVE_CUDA
    r.add(cuda::makeCudaBackend(*cpu));
#else
    r.add(makeUnavailableBackend("cuda",
                                 "this tpc was built without CUDA (configure with -DTPC_ENABLE_CUDA=ON)"));
#endif
    r.add(std::move(cpu));
    return r;
  }();
  return registry;
}

Expected<std::unique_ptr<Session>> Session::open(Plan plan, const SessionOptions &opts,
                                                 const std::string &backend) {
  return builtinBackends().open(backend, std::move(plan), opts);
}

} // namespace tpc::rt
