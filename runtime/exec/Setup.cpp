//===- Setup.cpp - what every backend's open does the same way -------------===//
//
// The checks before anything is allocated, the weights' source (memory or the mapped GGUF), arena sizes
// and the copy of a weight slice's pieces. The CPU session and the CUDA session both call these.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Setup.h"

#include "runtime/exec/Binding.h"
#include "runtime/exec/StepChecks.h"
#include "runtime/plan/PlanIO.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/mman.h>
#include <unistd.h>

namespace tpc::rt::exec {

namespace {
std::optional<uint64_t> mulAdd(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t m, r;
  if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, &r))
    return std::nullopt;
  return r;
}

/// SessionOptions::devices, sorted, each a distinct plan device; all of them when empty.
Expected<std::vector<int>> sessionDevices(const Plan &plan, const SessionOptions &opts) {
  const int n = static_cast<int>(plan.devices.size());
  std::vector<int> devs = opts.devices;
  if (devs.empty())
    for (int d = 0; d < n; ++d)
      devs.push_back(d);
  std::sort(devs.begin(), devs.end());
  for (size_t i = 0; i < devs.size(); ++i) {
    if (devs[i] < 0 || devs[i] >= n)
      return Error{fmt::format("session devices: {} is not a device of the plan (0..{})", devs[i], n - 1)};
    if (i > 0 && devs[i] == devs[i - 1])
      return Error{fmt::format("session devices: device {} is listed twice", devs[i])};
  }
  if (int(devs.size()) < n && !opts.comm)
    return Error{fmt::format("a session running {} of the plan's {} devices needs a communicator that "
                             "connects it to the others (SessionOptions::comm)",
                             devs.size(), n)};
  if (opts.comm) {
    if (opts.comm->size() != n)
      return Error{fmt::format("the {} communicator connects {} ranks but the plan has {} devices",
                               opts.comm->name(), opts.comm->size(), n)};
    const std::vector<int> local = opts.comm->localRanks();
    for (int d : devs)
      if (!std::binary_search(local.begin(), local.end(), d))
        return Error{fmt::format("the {} communicator does not serve device {} of this session",
                                 opts.comm->name(), d)};
  }
  return devs;
}
} // namespace

Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts) {
  using E = Expected<WeightSource>;
  WeightSource w;
  if (opts.ggufData) {
    if (opts.ggufDataSize < plan.ggufSize)
      return Error{fmt::format("weight data holds {} bytes, the plan expects a GGUF of {}", opts.ggufDataSize,
                               plan.ggufSize)};
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

Expected<OpenPlan> prepareOpen(const Plan &plan, const SessionOptions &opts) {
  using E = Expected<OpenPlan>;
  if (auto errs = validatePlan(plan); !errs.empty())
    return Error{"invalid plan: " + errs[0]};
  OpenPlan o;
  o.ctx = opts.ctxSize > 0 ? opts.ctxSize : plan.model.defaultCtx;
  if (o.ctx > (int64_t(1) << 26))
    return Error{fmt::format("--ctx-size {} is too large", o.ctx)};
  auto devices = sessionDevices(plan, opts);
  if (!devices)
    return Error{devices.message()};
  o.devices = std::move(*devices);
  auto weights = openWeightSource(plan, opts);
  if (!weights)
    return Error{weights.message()};
  o.weights = std::move(*weights);
  if (logitsTensorOf(plan.devices[0]) < 0)
    return Error{"device 0 has no OUTPUT_LOGITS tensor; recompile the plan"};
  for (int64_t t : {int64_t(1), plan.model.maxBatch}) {
    for (int d : o.devices)
      if (std::string e = checkDeviceSteps(plan, d, t); !e.empty())
        return Error{"plan does not fit its ops: " + e};
    if (std::string e = checkCollectives(plan, t); !e.empty())
      return Error{"plan does not fit its ops: " + e};
  }
  return E(std::move(o));
}

Expected<ArenaBytes> arenaBytes(const DevicePlan &dp, size_t d, int64_t ctx) {
  ArenaBytes b;
  b.weights = dp.weightBytes;
  b.acts = dp.activationBytes;
  b.hostActs = dp.hostActivationBytes;
  auto kv = mulAdd(static_cast<uint64_t>(ctx), dp.kvBytesPerToken, 0);
  auto total = kv ? mulAdd(1, b.weights, *kv) : std::nullopt;
  total = total ? mulAdd(1, *total, b.acts) : std::nullopt;
  total = total ? mulAdd(1, *total, b.hostActs) : std::nullopt;
  if (!total)
    return Error{fmt::format("device {}: memory size overflows", d)};
  b.kv = *kv;
  b.total = *total;
  return b;
}

std::string checkDeviceCapacity(size_t d, const ArenaBytes &b, int64_t ctx, uint64_t capacity) {
  if (!capacity || b.total <= capacity)
    return "";
  return fmt::format("device {} needs {} bytes (weights {}, activations {}, KV {} for --ctx-size {}) "
                     "but has {}; use more devices or a smaller --ctx-size",
                     d, b.total, b.weights, b.acts + b.hostActs, b.kv, ctx, capacity);
}

void releaseWeightSlice(const WeightSource &src, const WeightSlice &w) {
  if (!src.mapping)
    return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGE_SIZE));
  for (const WeightPiece &pc : w.pieces) {
    if (pc.rows == 0)
      continue;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(src.data + pc.fileOffset) / page * page;
    const uintptr_t hi = reinterpret_cast<uintptr_t>(src.data + pc.fileOffset + (pc.rows - 1) * pc.rowStride +
                                                     pc.rowBytes);
    ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
  }
}

void copyWeightSlice(const WeightSlice &w, const uint8_t *gguf, uint8_t *dst) {
  for (const WeightPiece &pc : w.pieces)
    for (uint64_t r = 0; r < pc.rows; ++r, dst += pc.rowBytes)
      std::memcpy(dst, gguf + pc.fileOffset + r * pc.rowStride, pc.rowBytes);
}

} // namespace tpc::rt::exec
