//===- Backends.cpp - the built-in backend registry ------------------------===//
//
// The CUDA backend gets the CPU Backend object for its host-placed steps (Backend::hostStepRunner), so
// neither backend includes the other. In a CUDA build, "cuda" is a stand-in that opens the plugin
// (CudaPluginLoader.h) the first time it is asked anything that needs it, then forwards to the plugin's
// Backend; `auto` asks it only when an NVIDIA driver may be present (mayBePresent).
//===----------------------------------------------------------------------===//
#include "runtime/backends/Backends.h"

#include "runtime/backends/CudaPluginLoader.h"
#include "runtime/cpu/CpuBackend.h"

#include <mutex>

namespace tpc::rt {

namespace {
#ifdef TPC_HAVE_CUDA
/// "cuda", living in libtpc_cuda.so: loaded on the first usable() or open().
class CudaPluginBackend final : public Backend {
public:
  explicit CudaPluginBackend(const Backend &hostCpu) : hostCpu_(hostCpu) {}
  std::string name() const override { return "cuda"; }
  Expected<void> mayBePresent() const override {
    if (!nvidiaDriverPresent())
      return Error{"no NVIDIA driver on this machine (no /dev/nvidia* or /proc/driver/nvidia)"};
    return {};
  }
  Expected<void> usable() const override {
    Expected<const Backend *> b = backend();
    if (!b)
      return Error{b.message()};
    return (*b)->usable();
  }
  Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts) const override {
    Expected<const Backend *> b = backend();
    if (!b)
      return Error{"backend 'cuda': " + b.message()};
    return (*b)->open(std::move(plan), opts);
  }
  // hostStepRunner: none (the CUDA backend has none either), without loading the plugin to say so.

private:
  /// The plugin's Backend, made once.
  Expected<const Backend *> backend() const {
    std::call_once(once_, [this] {
      Expected<const cuda::CudaPluginApi *> api = loadCudaPlugin();
      if (!api)
        error_ = api.message();
      else
        real_ = (*api)->makeBackend(hostCpu_);
    });
    if (!real_)
      return Error{error_};
    return real_.get();
  }

  const Backend &hostCpu_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<Backend> real_;
  mutable std::string error_;
};
#endif
} // namespace

const BackendRegistry &builtinBackends() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    std::unique_ptr<Backend> cpu = cpu::makeCpuBackend();
#ifdef TPC_HAVE_CUDA
    r.add(std::make_unique<CudaPluginBackend>(*cpu));
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
