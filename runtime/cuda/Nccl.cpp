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
  decltype(&ncclBroadcast) broadcast = nullptr;
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
      !sym(a.allReduce, "ncclAllReduce") || !sym(a.broadcast, "ncclBroadcast") ||
      !sym(a.groupStart, "ncclGroupStart") || !sym(a.groupEnd, "ncclGroupEnd") ||
      !sym(a.errorString, "ncclGetErrorString"))
    return Error{"libnccl.so.2 lacks the NCCL 2 API (ncclCommInitAll, ncclAllReduce, ncclBroadcast, ...)"};
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

void NcclComms::groupStart() { api_->check(api_->groupStart(), "ncclGroupStart"); }
void NcclComms::groupEnd() { api_->check(api_->groupEnd(), "ncclGroupEnd"); }

void NcclComms::allReduce(int rank, const float *in, float *out, int64_t count, cudaStream_t stream) {
  api_->check(api_->allReduce(in, out, static_cast<size_t>(count), ncclFloat, ncclSum,
                              static_cast<ncclComm_t>(comms_[rank]), stream),
              "ncclAllReduce");
}

void NcclComms::broadcast(int rank, const void *send, void *recv, uint64_t bytes, int root,
                          cudaStream_t stream) {
  api_->check(api_->broadcast(send, recv, static_cast<size_t>(bytes), ncclChar, root,
                              static_cast<ncclComm_t>(comms_[rank]), stream),
              "ncclBroadcast");
}

} // namespace tpc::rt::cuda
