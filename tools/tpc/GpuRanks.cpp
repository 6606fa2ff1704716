//===- GpuRanks.cpp - NCCL over MPI, or MPI on host-staged buffers ----------===//
//
// The steps of GpuRanks.h. Every exchange before NCCL starts is an all-gather (or a broadcast carrying a
// status), so a rank that fails there is known to all and every rank returns the error; a rank that fails
// to join NCCL ends the job, since its peers wait inside ncclCommInitRank for it. The GPU and NCCL calls
// go through the CUDA plugin's table (runtime/backends/CudaPluginLoader.h): tpc links no CUDA library.
//===----------------------------------------------------------------------===//
#include "tools/tpc/GpuRanks.h"

#include "runtime/backends/CudaPluginLoader.h"

#include <fmt/core.h>

#include <cstring>
#include <set>

namespace tpc::cli {

using namespace tpc::rt;

namespace {

/// This rank's GPU: --gpus (or every visible GPU), entry localRank % count. Sets `gpu` or returns the error.
std::string pickGpu(const cuda::CudaPluginApi &cuda, const comm::MpiWorld &w, const SessionOptions &options,
                    int &gpu) {
  const int visible = cuda.deviceCount();
  if (visible == 0)
    return "no CUDA GPU is visible on this host (check the driver and CUDA_VISIBLE_DEVICES); use --backend cpu";
  std::vector<int> gpus = options.ordinals;
  if (gpus.empty())
    for (int g = 0; g < visible; ++g)
      gpus.push_back(g);
  for (int g : gpus)
    if (g < 0 || g >= visible)
      return fmt::format("--gpus: GPU {} does not exist ({} visible on this host)", g, visible);
  gpu = gpus[size_t(w.localRank()) % gpus.size()];
  return "";
}

} // namespace

Expected<GpuRankComm> gpuRankCommunicator(const comm::MpiWorld &w, std::shared_ptr<comm::Communicator> hostComm,
                                          const Plan &, SessionOptions &options) {
  // 1. Every rank's GPU, named by host and PCI bus id, or its error. The plugin is loaded already: the
  // rank selected the "cuda" backend before calling this.
  Expected<const cuda::CudaPluginApi *> plugin = loadCudaPlugin();
  int gpu = -1;
  std::string error = plugin ? "" : plugin.message(), where;
  if (error.empty())
    error = pickGpu(**plugin, w, options, gpu);
  if (error.empty()) {
    if (auto bus = (*plugin)->gpuBusId(gpu); bus)
      where = w.host() + " " + *bus;
    else
      error = bus.message();
  }
  auto all = w.allGather(error.empty() ? "+" + where : "-" + error);
  if (!all)
    return Error{"choosing the GPUs: " + all.message()};
  std::set<std::string> distinct;
  for (int r = 0; r < w.size(); ++r) {
    const std::string &s = (*all)[r];
    if (s.empty() || s[0] != '+')
      return Error{r == w.rank() ? error
                                 : fmt::format("stopped choosing the GPUs: {}: {}",
                                               comm::MpiWorld::who(r, w.size(), ""),
                                               s.empty() ? "sent nothing" : s.substr(1))};
    distinct.insert(s.substr(1));
  }
  options.ordinals = {gpu};

  // 2a. Two ranks on one GPU: MPI on host-staged buffers (the same choice on every rank).
  if (int(distinct.size()) < w.size()) {
    auto c = (*plugin)->makeHostStagedCommunicator(std::move(hostComm), gpu);
    if (!c)
      return Error{c.message()};
    return GpuRankComm{c.take(), "MPI, host-staged (ranks share a GPU)"};
  }

  // 2b. Distinct GPUs: NCCL from the unique id rank 0 makes, broadcast over MPI with its status
  // (int 0 = ok, then the id's bytes).
  cuda::CudaPluginNcclId id;
  std::vector<int32_t> msg(1 + id.size() / 4, 0);
  if (w.rank() == 0) {
    if (auto made = (*plugin)->ncclUniqueId(); made)
      std::memcpy(&msg[1], made->data(), id.size());
    else
      msg[0] = 1, error = made.message();
  }
  if (auto ok = hostComm->broadcast(w.rank(), comm::Buffer{msg.data(), int64_t(msg.size())}, 0,
                                    comm::ElemType::I32);
      !ok)
    return Error{"sending NCCL's unique id: " + ok.message()};
  if (msg[0] != 0)
    return Error{w.rank() == 0 ? error : "rank 0 could not start NCCL (its message says why)"};
  std::memcpy(id.data(), &msg[1], id.size());
  auto c = (*plugin)->makeNcclRankCommunicator(id, w.rank(), w.size(), gpu);
  if (!c) { // the peers wait inside ncclCommInitRank for this rank: only ending the job releases them
    fmt::print(stderr, "tpc run: error: {}: {}; ending the job\n", w.who(), c.message());
    w.abortJob(1);
  }
  return GpuRankComm{c.take(), "NCCL"};
}

} // namespace tpc::cli
