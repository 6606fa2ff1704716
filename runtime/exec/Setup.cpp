//===- Setup.cpp - what every backend's open does the same way -------------===//
//
// The weights' source (memory or the mapped GGUF) and the address of every tensor of a device plan from
// its storage bases; the CPU session and the CUDA session both call these.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"
#include "runtime/exec/Ops.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace tpc::rt {

Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts) {
  using E = Expected<WeightSource>;
  WeightSource w;
  if (opts.ggufData) {
    if (opts.ggufDataSize < plan.ggufSize)
      return Error{fmt::format("weight data holds {} bytes, the plan expects a GGUF of {}",
                                  opts.ggufDataSize, plan.ggufSize)};
    w.data = opts.ggufData;
    return E(std::move(w));
  }
  auto checked = checkPlanGguf(plan, opts.ggufPath);
  if (!checked)
    return Error{checked.message()};
  const int fd = ::open(checked->c_str(), O_RDONLY);
  if (fd < 0)
    return Error{fmt::format("cannot open GGUF '{}': {}", *checked, std::strerror(errno))};
  if (plan.ggufSize == 0) {
    ::close(fd);
    return E(std::move(w));
  }
  void *addr = ::mmap(nullptr, plan.ggufSize, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED)
    return Error{fmt::format("cannot mmap GGUF '{}': {}", *checked, std::strerror(errno))};
  ::madvise(addr, plan.ggufSize, MADV_SEQUENTIAL); // the slices are read once, in file order
  const uint64_t size = plan.ggufSize;
  w.data = static_cast<const uint8_t *>(addr);
  w.mapping = std::shared_ptr<const void>(addr, [size](const void *p) { ::munmap(const_cast<void *>(p), size); });
  return E(std::move(w));
}

namespace exec {

std::vector<void *> resolveTensors(const DevicePlan &dp, const StorageBases &b) {
  std::vector<void *> ptr(dp.tensors.size(), nullptr);
  for (size_t i = 0; i < dp.tensors.size(); ++i) {
    const TensorDesc &t = dp.tensors[i];
    switch (t.storage) {
    case Storage::Activation:
      ptr[i] = (t.placement == Placement::Host ? b.hostActs : b.acts) + t.offset;
      break;
    case Storage::Weight:
      ptr[i] = b.weights[t.index];
      break;
    case Storage::Kv:
      ptr[i] = (*b.kv)[t.index].k;
      break;
    case Storage::InputTokens:
      ptr[i] = b.tokens;
      break;
    case Storage::InputPositions:
      ptr[i] = b.positions;
      break;
    case Storage::OutputLogits:
      ptr[i] = b.logits;
      break;
    case Storage::View:
      ptr[i] = static_cast<uint8_t *>(ptr[t.index]) + t.offset;
      break;
    }
  }
  return ptr;
}

int32_t logitsTensorOf(const DevicePlan &dp) {
  for (size_t i = 0; i < dp.tensors.size(); ++i)
    if (dp.tensors[i].storage == Storage::OutputLogits)
      return static_cast<int32_t>(i);
  return -1;
}

} // namespace exec
} // namespace tpc::rt
