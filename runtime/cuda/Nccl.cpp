//===- Nccl.cpp - NCCL through dlopen ----------------------------------------===//
#include "runtime/cuda/Nccl.h"

#include "runtime/cuda/CudaCheck.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>

namespace tpc::rt::cuda {

struct NcclComms::Api {
  void *lib = nullptr;
  decltype(&ncclCommInitAll) commInitAll = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
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

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NcclId must hold an ncclUniqueId");

Expected<std::unique_ptr<NcclComms::Api>> NcclComms::load(size_t gpus) {
  auto a = std::make_unique<Api>();
  for (const char *name : {"libnccl.so.2", "libnccl.so"})
    if ((a->lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!a->lib)
    return Error{std::string("the plan's devices sit on ") + std::to_string(gpus) +
                 " GPUs and need NCCL, but libnccl.so.2 cannot be loaded (" + ::dlerror() +
                 "); add its folder to LD_LIBRARY_PATH"};
  auto sym = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(a->lib, name));
    return fn != nullptr;
  };
  if (!sym(a->commInitAll, "ncclCommInitAll") || !sym(a->commDestroy, "ncclCommDestroy") ||
      !sym(a->getUniqueId, "ncclGetUniqueId") || !sym(a->commInitRank, "ncclCommInitRank") ||
      !sym(a->allReduce, "ncclAllReduce") || !sym(a->broadcast, "ncclBroadcast") ||
      !sym(a->groupStart, "ncclGroupStart") || !sym(a->groupEnd, "ncclGroupEnd") ||
      !sym(a->errorString, "ncclGetErrorString"))
    return Error{"libnccl.so.2 lacks the NCCL 2 API (ncclCommInitAll, ncclCommInitRank, ncclAllReduce, ...)"};
  return Expected<std::unique_ptr<Api>>(std::move(a));
}

Expected<std::unique_ptr<NcclComms>> NcclComms::create(const std::vector<int> &gpus) {
  using E = Expected<std::unique_ptr<NcclComms>>;
  auto api = load(gpus.size());
  if (!api)
    return Error{api.message()};
  std::unique_ptr<NcclComms> c(new NcclComms());
  c->api_ = api.take();
  Api &a = *c->api_;
  std::vector<ncclComm_t> comms(gpus.size());
  ncclResult_t r = a.commInitAll(comms.data(), static_cast<int>(gpus.size()), gpus.data());
  if (r != ncclSuccess)
    return Error{std::string("ncclCommInitAll: ") + a.errorString(r)};
  for (ncclComm_t cm : comms)
    c->comms_.push_back(cm);
  return E(std::move(c));
}

Expected<NcclId> NcclComms::uniqueId() {
  auto api = load(2);
  if (!api)
    return Error{api.message()};
  ncclUniqueId id;
  if (ncclResult_t r = (*api)->getUniqueId(&id); r != ncclSuccess)
    return Error{std::string("ncclGetUniqueId: ") + (*api)->errorString(r)};
  NcclId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

Expected<std::unique_ptr<NcclComms>> NcclComms::joinRank(const NcclId &id, int rank, int size, int gpu) {
  using E = Expected<std::unique_ptr<NcclComms>>;
  auto api = load(size_t(size));
  if (!api)
    return Error{api.message()};
  std::unique_ptr<NcclComms> c(new NcclComms());
  c->api_ = api.take();
  if (cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess)
    return Error{std::string("cudaSetDevice(") + std::to_string(gpu) + "): " + cudaGetErrorString(e)};
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t cm = nullptr;
  if (ncclResult_t r = c->api_->commInitRank(&cm, size, nid, rank); r != ncclSuccess)
    return Error{std::string("ncclCommInitRank (rank ") + std::to_string(rank) + " of " + std::to_string(size) +
                 "): " + c->api_->errorString(r)};
  c->comms_.push_back(cm);
  c->firstRank_ = rank;
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
                              static_cast<ncclComm_t>(commOf(rank)), stream),
              "ncclAllReduce");
}

void NcclComms::broadcast(int rank, const void *send, void *recv, uint64_t bytes, int root,
                          cudaStream_t stream) {
  api_->check(api_->broadcast(send, recv, static_cast<size_t>(bytes), ncclChar, root,
                              static_cast<ncclComm_t>(commOf(rank)), stream),
              "ncclBroadcast");
}

} // namespace tpc::rt::cuda
