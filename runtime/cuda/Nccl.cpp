//===- Nccl.cpp - NCCL through dlopen ----------------------------------------===//
#include "runtime/cuda/Nccl.h"

#include "runtime/cuda/CudaCheck.h"

#include <dlfcn.h>
#include <nccl.h>

#include <string>

namespace tpc::rt::cuda {

struct NcclComms::Api {
  void *lib = nullptr;
  decltype(&ncclCommInitAll) commInitAll = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  ~Api() {
    if (lib)
      ::dlclose(lib);
  }
  void check(ncclResult_t r, const char *what) const {
    if (r != ncclSuccess)
      throw CudaError(std::string(what) + ": " + errorString(r));
  }
};

Expected<std::unique_ptr<NcclComms>> NcclComms::create(const std::vector<int> &gpus) {
  using E = Expected<std::unique_ptr<NcclComms>>;
  std::unique_ptr<NcclComms> c(new NcclComms());
  c->api_ = std::make_unique<Api>();
  Api &a = *c->api_;
  for (const char *name : {"libnccl.so.2", "libnccl.so"})
    if ((a.lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!a.lib)
    return Error{std::string("the plan's devices sit on ") + std::to_string(gpus.size()) +
                    " GPUs and need NCCL, but libnccl.so.2 cannot be loaded (" + ::dlerror() +
                    "); add its folder to LD_LIBRARY_PATH"};
  auto sym = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(a.lib, name));
    return fn != nullptr;
  };
  if (!sym(a.commInitAll, "ncclCommInitAll") || !sym(a.commDestroy, "ncclCommDestroy") ||
      !sym(a.allReduce, "ncclAllReduce") || !sym(a.groupStart, "ncclGroupStart") ||
      !sym(a.groupEnd, "ncclGroupEnd") || !sym(a.errorString, "ncclGetErrorString"))
    return Error{"libnccl.so.2 lacks the NCCL 2 API (ncclCommInitAll, ncclAllReduce, ...)"};
  std::vector<ncclComm_t> comms(gpus.size());
  ncclResult_t r = a.commInitAll(comms.data(), static_cast<int>(gpus.size()), gpus.data());
  if (r != ncclSuccess)
    return Error{std::string("ncclCommInitAll: ") + a.errorString(r)};
  for (ncclComm_t cm : comms)
    c->comms_.push_back(cm);
  return E(std::move(c));
}

NcclComms::~NcclComms() {
  if (api_)
    for (void *cm : comms_)
      api_->commDestroy(static_cast<ncclComm_t>(cm));
}

void NcclComms::allReduce(const std::vector<const float *> &in, const std::vector<float *> &out,
                          int64_t count, const std::vector<cudaStream_t> &streams) {
  Api &a = *api_;
  a.check(a.groupStart(), "ncclGroupStart");
  for (size_t r = 0; r < comms_.size(); ++r)
    a.check(a.allReduce(in[r], out[r], static_cast<size_t>(count), ncclFloat, ncclSum,
                        static_cast<ncclComm_t>(comms_[r]), streams[r]),
            "ncclAllReduce");
  a.check(a.groupEnd(), "ncclGroupEnd");
}

} // namespace tpc::rt::cuda
