//===- CpuSession.cpp - the CPU backend's session: arenas, threads, the step loop ===//
//
// Tensor addresses are resolved once at open (arena base + offset, views after their bases); per call only
// the token dimension changes, so binding a step's operands is a shape substitution. The step loop hands
// collectives to exec::CollectiveRunner and every other step to the device's CpuStepRunner.
// Devices after the session's first run on persistent threads started at open() and woken per chunk
// (threads created per call, with sleeping barriers, made a 2-device tiny-llama decode step ~0.65 ms
// instead of ~0.25 ms); the first device runs on the caller. All of them meet at each collective in the
// communicator.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuSession.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/ops/Ops.h"
#include "runtime/exec/Binding.h"
#include "runtime/exec/Collectives.h"
#include "runtime/exec/Setup.h"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace tpc::rt::cpu {

using exec::KvBuffers;
using exec::TensorRef;

namespace {
/// One 64-byte aligned, zeroed allocation.
struct Arena {
  uint8_t *data = nullptr;
  uint64_t size = 0;
  bool allocate(uint64_t bytes) {
    size = bytes;
    uint64_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
      return false;
    data = static_cast<uint8_t *>(std::aligned_alloc(64, rounded ? rounded : 64));
    if (data)
      std::memset(data, 0, rounded);
    return data != nullptr;
  }
  ~Arena() { std::free(data); }
};

struct Device {
  int index = 0;                        ///< the plan device
  Arena weights, acts, hostActs, kvMem; ///< hostActs: the plan's host-placed activations
  std::vector<KvBuffers> kv;
  std::vector<void *> ptr; ///< resolved address of every tensor
  std::vector<int32_t> tokens, positions;
  std::vector<float> logits;
  std::unique_ptr<CpuStepRunner> runner;
  std::vector<size_t> batchEnd; ///< matmulBatchEnds: matmuls on one input that run as one job
};

/// The kernels of the collective compositions: each device's own thread group.
class CpuCollectiveKernels final : public exec::CollectiveKernels {
public:
  void setThreads(int rank, ThreadGroup *tg) {
    if (static_cast<size_t>(rank) >= tg_.size())
      tg_.resize(rank + 1, nullptr);
    tg_[rank] = tg;
  }
  void copy(int, const TensorRef &x, const TensorRef &y) override { opCopy(x, y); }
  void add(int rank, const TensorRef &a, const TensorRef &b, const TensorRef &y) override {
    opBinary(OpKind::Add, a, b, y, *tg_[rank]);
  }
  void rmsNorm(int rank, const TensorRef &x, const TensorRef *w, const TensorRef &y, float eps) override {
    opRmsNorm(x, w, y, eps, *tg_[rank]);
  }

private:
  std::vector<ThreadGroup *> tg_; ///< by plan device
};

inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
/// A waiting device thread (or the caller) spins (~20 us: PAUSE takes ~70 ns on the VMs), then yields
/// until kDeviceSleepAfter, then blocks: between decode steps the caller samples (an argmax over the
/// vocabulary takes longer than 20 us), and a futex wake-up per step is latency on every token.
constexpr int kDeviceSpin = 300;
constexpr auto kDeviceSleepAfter = std::chrono::milliseconds(2);

/// Waits until done() holds: spin, yield, then block(). Returns at once when done() already holds.
template <typename Done, typename Block> void waitFor(Done done, Block block) {
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0; !done(); ++spins) {
    if (spins < kDeviceSpin)
      cpuRelax();
    else if (std::chrono::steady_clock::now() - start < kDeviceSleepAfter)
      std::this_thread::yield();
    else
      return block();
  }
}

class CpuSession final : public Session {
public:
  CpuSession(Plan plan, int64_t ctx, std::vector<int> devices)
      : Session(std::move(plan), ctx, std::move(devices)) {}
  ~CpuSession() override { stopDeviceThreads(); }

  /// Everything open() does after exec::prepareOpen: capacity, arenas, weights, threads.
  Expected<void> init(const exec::OpenPlan &o, const SessionOptions &opts);

  const char *backendName() const override { return "CPU"; }
  int threadsPerDevice() const override { return threadsPerDevice_; }
  std::vector<uint64_t> deviceBytes() const override;
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const override;
  std::vector<int> memoryOf() const override;
  double copyBandwidth(int) const override {
    return hostCopyBandwidth(threadsPerDevice_ * static_cast<int>(devs_.size()));
  }
  std::string memoryName(int) const override { return "host memory"; }
  int hostMemory() const override { return 0; }

protected:
  Expected<void> runChunk(const int32_t *tokens, const int32_t *positions, int64_t t, float *logits) override;

private:
  Expected<void> runDevice(size_t i, int64_t t);
  /// runDevice with errors recorded in `failure_` and the communicator aborted, so peers never hang.
  void runGuarded(size_t i, int64_t t);
  void startDeviceThreads();
  void stopDeviceThreads();
  void deviceLoop(size_t i);
  /// Runs every device on `t` tokens (the first on the caller) and returns when all are done.
  void runAll(int64_t t);

  int threadsPerDevice_ = 1;
  std::vector<Device> devs_;  ///< the session's devices, in plan order
  int32_t logitsTensor_ = -1; ///< on device 0
  std::shared_ptr<comm::Communicator> comm_;
  CpuCollectiveKernels kernels_;
  std::unique_ptr<exec::CollectiveRunner> collectives_;
  std::string failure_; ///< first error raised inside a device thread
  std::mutex failureMu_;

  // Persistent device threads (devices 1..N-1 of devs_). A call publishes its token count and bumps
  // runGen_; each thread runs its device and decrements pending_. Waits spin briefly (a decode step is
  // short), then sleep on the condition variables so an idle session costs no CPU.
  std::vector<std::thread> deviceThreads_;
  std::mutex runMu_;
  std::condition_variable runCv_, doneCv_;
  std::atomic<uint64_t> runGen_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  int64_t runTokens_ = 0;
};

void CpuSession::runGuarded(size_t i, int64_t t) {
  // A kernel that throws (it should not: open() checked every step) must neither terminate the process
  // nor leave the peers waiting at a collective.
  Expected<void> ok;
  try {
    ok = runDevice(i, t);
  } catch (const std::exception &e) {
    ok = Error{e.what()};
  }
  if (ok)
    return;
  std::lock_guard<std::mutex> lock(failureMu_);
  if (failure_.empty())
    failure_ = fmt::format("device {}: {}", devs_[i].index, ok.message());
  comm_->abort(failure_);
}

void CpuSession::startDeviceThreads() {
  for (size_t i = 1; i < devs_.size(); ++i)
    deviceThreads_.emplace_back([this, i] { deviceLoop(i); });
}

void CpuSession::stopDeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(runMu_);
    stopping_ = true;
    runGen_.fetch_add(1);
  }
  runCv_.notify_all();
  for (std::thread &th : deviceThreads_)
    th.join();
  deviceThreads_.clear();
}

void CpuSession::deviceLoop(size_t i) {
  uint64_t seen = 0;
  for (;;) {
    waitFor([&] { return runGen_.load(std::memory_order_acquire) != seen; },
            [&] {
              std::unique_lock<std::mutex> lock(runMu_);
              runCv_.wait(lock, [&] { return runGen_.load() != seen; });
            });
    seen = runGen_.load(std::memory_order_acquire);
    if (stopping_.load())
      return;
    runGuarded(i, runTokens_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(runMu_); // orders the notify after the caller's predicate check
      doneCv_.notify_one();
    }
  }
}

void CpuSession::runAll(int64_t t) {
  const int others = static_cast<int>(devs_.size()) - 1;
  if (others > 0) {
    runTokens_ = t;
    pending_.store(others, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(runMu_);
      runGen_.fetch_add(1, std::memory_order_release);
    }
    runCv_.notify_all();
  }
  runGuarded(0, t);
  waitFor([&] { return pending_.load(std::memory_order_acquire) == 0; },
          [&] {
            std::unique_lock<std::mutex> lock(runMu_);
            doneCv_.wait(lock, [&] { return pending_.load() == 0; });
          });
}

Expected<void> CpuSession::runDevice(size_t i, int64_t t) {
  Device &dev = devs_[i];
  const DevicePlan &dp = plan().devices[dev.index];
  const bool prof = profiling() && i == 0; // the caller's thread, the only one touching the profile
  std::vector<TensorRef> in, out;
  std::vector<std::vector<TensorRef>> bins, bouts;
  std::vector<const Step *> bsteps;
  for (size_t si = 0; si < dp.steps.size(); ++si) {
    const Step &s = dp.steps[si];
    auto t0 = std::chrono::steady_clock::now();
    if (const size_t end = dev.batchEnd[si]; end > si + 1) {
      // Matmuls on one input (Q/K/V, gate/up) as one job; the profile books it on the first step.
      bins.resize(end - si);
      bouts.resize(end - si);
      bsteps.clear();
      for (size_t j = si; j < end; ++j) {
        bsteps.push_back(&dp.steps[j]);
        exec::bindOperands(dp, dev.ptr, dp.steps[j], t, bins[j - si], bouts[j - si]);
      }
      if (Expected<void> ok = dev.runner->runBatch(bsteps, bins, bouts); !ok)
        return ok;
      if (prof)
        recordStep(si, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      si = end - 1;
      continue;
    }
    exec::bindOperands(dp, dev.ptr, s, t, in, out);
    Expected<void> ok;
    if (isCollective(s.op)) {
      ok = collectives_->run({{dev.index, si, &in, &out, nullptr}}, t);
      // The runner keeps converted inputs until their memory is written; a communicator may also use its
      // input buffers as scratch, so both count as written.
      dev.runner->noteWrites(in);
      dev.runner->noteWrites(out);
    } else {
      ok = dev.runner->run(s, in, out, dev.kv);
    }
    if (!ok)
      return ok;
    if (prof)
      recordStep(si, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return {};
}

Expected<void> CpuSession::runChunk(const int32_t *tokens, const int32_t *positions, int64_t t,
                                    float *logits) {
  for (Device &dev : devs_) {
    std::copy(tokens, tokens + t, dev.tokens.begin());
    std::copy(positions, positions + t, dev.positions.begin());
    dev.runner->forgetInputs(); // a new chunk: nothing converted in the last one is read again
  }
  runAll(t);
  if (!failure_.empty())
    return Error{failure_};
  if (logits) // devs_[0] is device 0 whenever the session returns logits
    std::memcpy(logits, devs_[0].ptr[logitsTensor_], t * plan().model.nVocab * sizeof(float));
  return {};
}

Expected<void> CpuSession::init(const exec::OpenPlan &o, const SessionOptions &opts) {
  const Plan &p = plan();
  const int64_t ctx = ctxSize();
  const int threads =
      opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threadsPerDevice_ = std::max(1, threads / static_cast<int>(o.devices.size()));

  // Capacity: every CPU "device" lives in host memory, so all arenas together must fit in RAM.
  std::vector<exec::ArenaBytes> sizes;
  uint64_t need = 0;
  for (int d : o.devices) {
    auto b = exec::arenaBytes(p.devices[d], d, ctx);
    if (!b)
      return Error{b.message()};
    if (__builtin_add_overflow(need, b->total, &need))
      return Error{"the plan's memory size overflows"};
    sizes.push_back(*b);
  }
  const uint64_t ram =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && need > ram)
    return Error{fmt::format("the plan needs {:.2f} GiB of host memory for --ctx-size {} but the machine has "
                             "{:.2f} GiB; use a smaller --ctx-size",
                             need / double(1ull << 30), ctx, ram / double(1ull << 30))};
  devs_.resize(o.devices.size());
  for (size_t i = 0; i < devs_.size(); ++i) {
    const int d = o.devices[i];
    const DevicePlan &dp = p.devices[d];
    const exec::ArenaBytes &z = sizes[i];
    Device &dev = devs_[i];
    dev.index = d;
    if (std::string e = exec::checkDeviceCapacity(d, z, ctx, opts.maxDeviceBytes); !e.empty())
      return Error{e};
    if (!dev.weights.allocate(z.weights) || !dev.acts.allocate(z.acts) ||
        !dev.hostActs.allocate(z.hostActs) || !dev.kvMem.allocate(z.kv))
      return Error{
          fmt::format("device {}: cannot allocate {} bytes (weights + activations + KV for --ctx-size "
                      "{}); use more devices or a smaller --ctx-size",
                      d, z.total, ctx)};
    uint64_t at = 0;
    for (const KvCache &c : dp.kv) {
      KvBuffers b;
      b.desc = c;
      b.ctx = ctx;
      const uint64_t eb = dtypeBytes(c.dtype);
      b.k = dev.kvMem.data + at;
      at += ctx * c.nHeadKv * c.headDimK * eb;
      b.v = dev.kvMem.data + at;
      at += ctx * c.nHeadKv * c.headDimV * eb;
      dev.kv.push_back(b);
    }
    dev.tokens.assign(p.model.maxBatch, 0);
    dev.positions.assign(p.model.maxBatch, 0);
    dev.runner = std::make_unique<CpuStepRunner>(threadsPerDevice_);
    dev.runner->enableActivationCache(); // every write of this device goes through runDevice
    dev.batchEnd = matmulBatchEnds(dp);

    exec::StorageBases bases;
    bases.acts = dev.acts.data;
    bases.hostActs = dev.hostActs.data; // both arenas are host memory here, but each has its own offsets
    for (const WeightSlice &w : dp.weights)
      bases.weights.push_back(dev.weights.data + w.offset);
    bases.kv = &dev.kv;
    bases.tokens = dev.tokens.data();
    bases.positions = dev.positions.data();
    if (exec::logitsTensorOf(dp) >= 0) {
      dev.logits.assign(static_cast<size_t>(p.model.maxBatch * p.model.nVocab), 0.0f);
      bases.logits = dev.logits.data();
    }
    dev.ptr = exec::resolveTensors(dp, bases);
    // Copy the weight slices, piece by piece, rows in order.
    const std::vector<WeightSlice> &ws = dp.weights;
    uint8_t *base = dev.weights.data;
    dev.runner->threadGroup().parallelFor(static_cast<int64_t>(ws.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t w = b; w < e; ++w)
        exec::copyWeightSlice(ws[w], o.weights.data, base + ws[w].offset);
    });
    kernels_.setThreads(d, &dev.runner->threadGroup());
  }
  logitsTensor_ = exec::logitsTensorOf(p.devices[0]);
  comm_ = opts.comm ? opts.comm
                    : std::make_shared<comm::InProcessCommunicator>(static_cast<int>(p.devices.size()));
  collectives_ = std::make_unique<exec::CollectiveRunner>(p, *comm_, kernels_);
  startDeviceThreads();
  return {};
}

std::vector<uint64_t> CpuSession::deviceBytes() const {
  std::vector<uint64_t> out;
  for (const Device &d : devs_)
    out.push_back(d.weights.size + d.acts.size + d.hostActs.size + d.kvMem.size);
  return out;
}

std::vector<int> CpuSession::memoryOf() const {
  std::vector<int> out(plan().devices.size(), -1);
  for (const Device &d : devs_)
    out[d.index] = 0;
  return out;
}

std::vector<float> CpuSession::tensorData(size_t device, int32_t id, int64_t tokens) const {
  const Device *dev = nullptr;
  for (const Device &d : devs_)
    if (static_cast<size_t>(d.index) == device)
      dev = &d;
  if (!dev || id < 0 || static_cast<size_t>(id) >= dev->ptr.size() ||
      plan().devices[device].tensors[id].storage == Storage::Weight)
    return {};
  TensorRef r = exec::bindTensor(plan().devices[device], dev->ptr, id, tokens);
  std::vector<float> out(static_cast<size_t>(r.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = r.dtype == DType::F32   ? r.f()[i]
             : r.dtype == DType::I32 ? static_cast<float>(r.i()[i])
                                     : halfToFloat(static_cast<const uint16_t *>(r.data)[i]);
  return out;
}
} // namespace

Expected<std::unique_ptr<Session>> openCpuSession(Plan plan, const SessionOptions &opts) {
  using E = Expected<std::unique_ptr<Session>>;
  auto o = exec::prepareOpen(plan, opts);
  if (!o)
    return Error{o.message()};
  const int64_t ctx = o->ctx;
  std::vector<int> devices = o->devices;
  auto s = std::make_unique<CpuSession>(std::move(plan), ctx, std::move(devices));
  if (Expected<void> ok = s->init(*o, opts); !ok)
    return Error{ok.message()};
  return E(std::unique_ptr<Session>(std::move(s)));
}

double hostCopyBandwidth(int threads) {
  const size_t bytes = size_t(256) << 20;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  threads = std::max(1, threads);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        const size_t lo = bytes * i / threads, hi = bytes * (i + 1) / threads;
        std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
      });
    for (std::thread &t : pool)
      t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0)
      best = std::max(best, 2.0 * double(bytes) / s);
  }
  return best;
}

} // namespace tpc::rt::cpu
