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

Expected<void> setCommPayload(const Plan &plan, const SessionOptions &opts, comm::Communicator &comm) {
  const CommDtype t = opts.commDtype.value_or(plan.commDtype);
  const comm::Payload p = t == CommDtype::BF16 ? comm::Payload::BF16 : comm::Payload::F32;
  if (!comm.supportsPayload(p))
    return Error{fmt::format("--comm-dtype {}: the {} communicator moves f32 all-reduce payloads only; run with "
                             "--comm-dtype f32",
                             commDtypeName(t), comm.name())};
  comm.setPayload(p);
  return {};
}

Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts) {
  using E = Expected<WeightSource>;
  WeightSource w;
  if (opts.ggufData) {
    if (opts.ggufDataSize < plan.ggufSize)
      return Error{fmt::format("weight data holds {} bytes, the plan expects a GGUF of {}", opts.ggufDataSize,
                               plan.ggufSize)};
    w.data = opts.ggufData;
    w.size = opts.ggufDataSize;
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
  if (addr == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return Error{fmt::format("cannot mmap GGUF '{}': {}", *checked, std::strerror(err))};
  }
  w.file = std::shared_ptr<const int>(new int(fd), [](const int *f) {
    ::close(*f);
    delete f;
  });
  // Copies read the slices once, in file order; a backend that reads some in place advises those again.
  ::madvise(addr, plan.ggufSize, MADV_SEQUENTIAL);
  const uint64_t size = plan.ggufSize;
  w.data = static_cast<const uint8_t *>(addr);
  w.size = size;
  w.mapping = std::shared_ptr<const void>(addr, [size](const void *p) { ::munmap(const_cast<void *>(p), size); });
  return E(std::move(w));
}

Expected<OpenPlan> prepareOpen(const Plan &plan, const SessionOptions &opts) {
  using E = Expected<OpenPlan>;
  if (auto errs = validatePlan(plan); !errs.empty())
    return Error{"invalid plan: " + errs[0]};
  markPhase(opts.timeline, "validate plan");
  OpenPlan o;
  o.ctx = opts.ctxSize > 0 ? opts.ctxSize : plan.model.defaultCtx;
  if (o.ctx > (int64_t(1) << 26))
    return Error{fmt::format("--ctx-size {} is too large", o.ctx)};
  if (opts.sequences < 1 || opts.sequences > kMaxSequences)
    return Error{fmt::format("sequences: {} is not in 1..{} (the sequences a session's KV cache holds, e.g. "
                             "tpc serve -np)",
                             opts.sequences, kMaxSequences)};
  o.sequences = opts.sequences;
  auto devices = sessionDevices(plan, opts);
  if (!devices)
    return Error{devices.message()};
  o.devices = std::move(*devices);
  auto weights = openWeightSource(plan, opts);
  if (!weights)
    return Error{weights.message()};
  o.weights = std::move(*weights);
  markPhase(opts.timeline, "check + map GGUF");
  if (logitsTensorOf(plan.devices[0]) < 0)
    return Error{"device 0 has no OUTPUT_LOGITS tensor; recompile the plan"};
  for (auto [t, rows] : checkedCallSizes(plan)) {
    for (int d : o.devices)
      if (std::string e = checkDeviceSteps(plan, d, t, rows); !e.empty())
        return Error{"plan does not fit its ops: " + e};
    if (std::string e = checkCollectives(plan, t, rows); !e.empty())
      return Error{"plan does not fit its ops: " + e};
  }
  markPhase(opts.timeline, "step checks");
  return E(std::move(o));
}

namespace {
/// A cache half's bytes rounded up to 4: q8_0 / q4_0 rows are 34 / 18 bytes per block, so a quantized
/// half may end 2 bytes past a multiple of 4, and the next half (an f32 one, or a recurrent state that
/// kernels read as floats) must still start aligned. f16 and f32 halves are multiples of 4 already.
uint64_t kvHalfBytes(uint64_t bytes) { return (bytes + 3) / 4 * 4; }
} // namespace

std::vector<KvPlacement> kvLayout(const DevicePlan &dp, int64_t ctx, int32_t sequences, int64_t maxBatch) {
  std::vector<KvPlacement> out;
  uint64_t at = 0;
  for (const KvCache &c : dp.kv) {
    KvPlacement p;
    p.positions = kvPositions(c, ctx, maxBatch);
    const uint64_t cells = static_cast<uint64_t>(p.positions) * static_cast<uint64_t>(sequences);
    p.kOffset = at;
    at += kvHalfBytes(cells * kvCellBytesK(c));
    p.vOffset = at;
    at += kvHalfBytes(cells * kvCellBytesV(c));
    out.push_back(p);
  }
  return out;
}

Expected<ArenaBytes> arenaBytes(const DevicePlan &dp, size_t d, int64_t ctx, int32_t sequences,
                                int64_t maxBatch) {
  ArenaBytes b;
  b.weights = dp.weightBytes;
  b.acts = dp.activationBytes;
  b.hostActs = dp.hostActivationBytes;
  // Checked before kvLayout adds the same products unchecked.
  std::optional<uint64_t> kv = 0;
  for (const KvCache &c : dp.kv) {
    auto cells = mulAdd(static_cast<uint64_t>(kvPositions(c, ctx, maxBatch)), static_cast<uint64_t>(sequences), 0);
    auto k = cells ? mulAdd(*cells, kvCellBytesK(c), 0) : std::nullopt;
    auto v = cells ? mulAdd(*cells, kvCellBytesV(c), 0) : std::nullopt;
    kv = k && v && kv ? mulAdd(1, kvHalfBytes(*k), *kv) : std::nullopt;
    kv = kv ? mulAdd(1, kvHalfBytes(*v), *kv) : std::nullopt;
  }
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

const uint8_t *weightInPlace(const WeightSlice &w, const WeightSource &src) {
  if (!src.mapping || w.pieces.empty() || w.bytes == 0)
    return nullptr;
  uint64_t at = w.pieces.front().fileOffset;
  for (const WeightPiece &pc : w.pieces) {
    if (pc.fileOffset != at || (pc.rows > 1 && pc.rowStride != pc.rowBytes))
      return nullptr; // a gap between rows or pieces: the packed layout differs from the file's
    at += pc.rows * pc.rowBytes; // validatePlan checked every piece lies inside the GGUF
  }
  const uint8_t *p = src.data + w.pieces.front().fileOffset;
  if (at - w.pieces.front().fileOffset != w.bytes || at > src.size || reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return nullptr;
  return p;
}

void releaseCopiedPages(const WeightSlice &w, const WeightSource &src) {
  if (!src.mapping)
    return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(src.data);
  for (const WeightPiece &pc : w.pieces) {
    if (pc.rows == 0 || pc.rowBytes == 0)
      continue; // reads nothing (an empty share), so it may not release its tensor's pages
    const uintptr_t lo = (base + pc.fileOffset + page - 1) / page * page;
    const uintptr_t hi = (base + pc.fileOffset + (pc.rows - 1) * pc.rowStride + pc.rowBytes) / page * page;
    if (hi > lo)
      ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
  }
}

uint64_t releasePagesOutside(std::vector<std::pair<uint64_t, uint64_t>> keep, const WeightSource &src) {
  if (!src.mapping || src.size == 0)
    return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::sort(keep.begin(), keep.end());
  keep.emplace_back(src.size, src.size); // the tail after the last span
  uint64_t released = 0, from = 0;       // `from`: the first page no earlier span touches
  for (auto [lo, hi] : keep) {
    const uint64_t to = std::min(lo, src.size) / page * page;
    if (to > from) {
      // RANDOM as well: the advice splits the mapping there, and the kernel maps pages around a fault only
      // within the fault's part, so later faults on a kept span do not bring the gap's pages back.
      ::madvise(const_cast<uint8_t *>(src.data) + from, to - from, MADV_DONTNEED);
      ::madvise(const_cast<uint8_t *>(src.data) + from, to - from, MADV_RANDOM);
      released += to - from;
    }
    from = std::max(from, (std::min(hi, src.size) + page - 1) / page * page);
  }
  return released;
}

namespace {
/// Contiguous piece `pc` read from the file into dst; false (nothing promised about dst) on an I/O error or
/// a short file, which the caller then copies through the mapping.
bool readPiece(int fd, const WeightPiece &pc, uint8_t *dst) {
  uint64_t left = pc.rows * pc.rowBytes, at = pc.fileOffset;
  while (left > 0) {
    const ssize_t n = ::pread(fd, dst, std::min<uint64_t>(left, uint64_t(1) << 30), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    dst += n;
    at += static_cast<uint64_t>(n);
    left -= static_cast<uint64_t>(n);
  }
  return true;
}
} // namespace

void copyWeightRowsReleasing(const WeightPiece &pc, uint64_t r0, uint64_t r1, const WeightSource &src,
                             uint8_t *dst) {
  if (r1 <= r0)
    return;
  if (!src.mapping) {
    for (uint64_t r = r0; r < r1; ++r, dst += pc.rowBytes)
      std::memcpy(dst, src.data + pc.fileOffset + r * pc.rowStride, pc.rowBytes);
    return;
  }
  if (src.file && (r1 - r0 == 1 || pc.rowStride == pc.rowBytes)) {
    WeightPiece run = pc;
    run.fileOffset = pc.fileOffset + r0 * pc.rowStride;
    run.rows = r1 - r0;
    if (readPiece(*src.file, run, dst))
      return;
  }
  // A fault maps the pages around it too (the kernel's fault-around, 64 KiB by default), which for rows
  // interleaved with other devices' rows are theirs: each group releases that far beyond its own rows.
  constexpr uint64_t kSpan = 1 << 20, kAround = 64 << 10;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t perGroup = pc.rowStride ? std::max<uint64_t>(1, kSpan / pc.rowStride) : r1 - r0;
  for (uint64_t r = r0; r < r1; r += perGroup) {
    const uint64_t n = std::min(perGroup, r1 - r);
    const uint64_t first = pc.fileOffset + r * pc.rowStride;
    for (uint64_t k = 0; k < n; ++k, dst += pc.rowBytes)
      std::memcpy(dst, src.data + first + k * pc.rowStride, pc.rowBytes);
    const uint64_t lo = (first > kAround ? first - kAround : 0) / page * page;
    const uint64_t end = first + (n - 1) * pc.rowStride + pc.rowBytes + kAround;
    const uint64_t hi = std::min(src.size, (end + page - 1) / page * page);
    if (hi > lo && reinterpret_cast<uintptr_t>(src.data) % page == 0)
      ::madvise(const_cast<uint8_t *>(src.data) + lo, hi - lo, MADV_DONTNEED);
  }
}

void copyWeightSlice(const WeightSlice &w, const uint8_t *gguf, uint8_t *dst) {
  for (const WeightPiece &pc : w.pieces)
    for (uint64_t r = 0; r < pc.rows; ++r, dst += pc.rowBytes)
      std::memcpy(dst, gguf + pc.fileOffset + r * pc.rowStride, pc.rowBytes);
}

} // namespace tpc::rt::exec
