//===- CudaPlugin.cpp - the entry points of libtpc_cuda.so -------------------===//
//
// The three C functions of CudaPlugin.h, the only symbols the module exports (it is built with hidden
// visibility and its static libraries' symbols hidden). Everything here forwards to the backend.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaPlugin.h"

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaSession.h"
#include "runtime/cuda/RankCommunicators.h"

#include <cstring>

namespace tpc::rt::cuda {
namespace {

static_assert(sizeof(CudaPluginNcclId) == sizeof(NcclId), "CudaPluginNcclId must hold NCCL's unique id");

Expected<CudaPluginNcclId> ncclUniqueId() {
  Expected<NcclId> id = NcclComms::uniqueId();
  if (!id)
    return Error{id.message()};
  CudaPluginNcclId out;
  std::memcpy(out.data(), id->data(), out.size());
  return out;
}

Expected<std::shared_ptr<comm::Communicator>> ncclRankCommunicator(const CudaPluginNcclId &id, int rank,
                                                                   int size, int gpu) {
  NcclId nccl;
  std::memcpy(nccl.data(), id.data(), nccl.size());
  return makeNcclRankCommunicator(nccl, rank, size, gpu);
}

const std::string &buildTag() {
  static const std::string tag = cudaPluginBuildTag(TPC_PLUGIN_VERSION);
  return tag;
}

} // namespace
} // namespace tpc::rt::cuda

#define TPC_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

TPC_PLUGIN_EXPORT int tpc_cuda_plugin_abi() { return tpc::rt::cuda::kCudaPluginAbi; }

TPC_PLUGIN_EXPORT const char *tpc_cuda_plugin_build() { return tpc::rt::cuda::buildTag().c_str(); }

TPC_PLUGIN_EXPORT const tpc::rt::cuda::CudaPluginApi *tpc_cuda_plugin_api() {
  using namespace tpc::rt::cuda;
  static const CudaPluginApi api = {makeCudaBackend, cudaDeviceCount,      gpuBusId,
                                    ncclUniqueId,    ncclRankCommunicator, makeHostStagedCommunicator};
  return &api;
}
