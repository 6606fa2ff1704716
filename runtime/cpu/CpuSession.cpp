//===- Executor.cpp - sessions: arenas, weight loading, the step loop -------===//
//
// Tensor addresses are resolved once at open (arena base + offset, views after their bases); per call only
// the token dimension changes, so binding a step's operands is a shape substitution. The step loop runs the
// collectives itself and every other step through runLocalStep (LocalStep.cpp, shared with other backends).
// Placement does not matter here: every "device" of the CPU backend is host memory, one arena per kind.
// Devices 1..N-1 run on persistent threads started at open() and woken per evaluate() chunk (threads
// created per call, with sleeping barriers, made a 2-device tiny-llama decode step ~0.65 ms instead of
// ~0.25 ms); device 0 runs on the caller. All of them meet at each collective in the shared Rendezvous.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"

#include "runtime/exec/Collectives.h"
#include "runtime/exec/Ops.h"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace tpc::rt {

using namespace exec;

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
  Arena weights, acts, hostActs, kvMem; ///< hostActs: the plan's host-placed activations
  std::vector<KvBuffers> kv;
  std::vector<void *> ptr; ///< resolved address of every tensor
  std::vector<int32_t> tokens, positions;
  std::vector<float> logits;
  std::unique_ptr<ThreadGroup> tg;
};

std::optional<uint64_t> mulAdd(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t m, r;
  if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, &r))
    return std::nullopt;
  return r;
}
} // namespace

struct Session::Impl {
  Plan plan;
  int64_t ctx = 0;
  int threadsPerDevice = 1;
  std::vector<Device> devs;
  std::unique_ptr<Rendezvous> rv;
  int32_t logitsTensor = -1; ///< on device 0
  bool profiling = false;
  std::string failure; ///< first error raised inside a device thread; the session is unusable after it
  std::mutex failureMu;
  std::vector<StepProfile> prof;

  // Persistent device threads (devices 1..N-1). A call publishes its token count and bumps runGen; each
  // thread runs its device and decrements pending. Waits spin briefly (a decode step is short), then
  // sleep on the condition variables so an idle session costs no CPU.
  std::vector<std::thread> deviceThreads;
  std::mutex runMu;
  std::condition_variable runCv, doneCv;
  std::atomic<uint64_t> runGen{0};
  std::atomic<int> pending{0};
  std::atomic<bool> stopping{false};
  int64_t runTokens = 0;

  ~Impl() { stopDeviceThreads(); }

  TensorRef bind(size_t d, int32_t id, int64_t t) const {
    return bindTensor(plan.devices[d], devs[d].ptr, id, t);
  }
  void bindStep(size_t d, const Step &s, int64_t t, std::vector<TensorRef> &in,
                std::vector<TensorRef> &out) const {
    bindOperands(plan.devices[d], devs[d].ptr, s, t, in, out);
  }

  std::string checkAll(int64_t t);
  std::string checkCollectives(int64_t t);
  void runDevice(size_t d, int64_t t);
  /// runDevice with errors recorded in `failure` and the rendezvous aborted, so peers never hang.
  void runGuarded(size_t d, int64_t t);
  void startDeviceThreads();
  void stopDeviceThreads();
  void deviceLoop(size_t d);
  /// Runs every device on `t` tokens (device 0 on the caller) and returns when all are done.
  void runAll(int64_t t);
};

namespace {
inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
/// Spin iterations before a waiting device thread (or the caller) blocks (~20 us: PAUSE takes ~70 ns on the
/// VMs).
constexpr int kDeviceSpin = 300;
} // namespace

void Session::Impl::runGuarded(size_t d, int64_t t) {
  // A kernel that throws (it should not: open() checked every step) must neither terminate the process
  // nor leave the peers waiting at a collective.
  try {
    runDevice(d, t);
  } catch (const std::exception &e) {
    std::lock_guard<std::mutex> lock(failureMu);
    if (failure.empty())
      failure = fmt::format("device {}: {}", d, e.what());
    rv->abort();
  }
}

void Session::Impl::startDeviceThreads() {
  for (size_t d = 1; d < devs.size(); ++d)
    deviceThreads.emplace_back([this, d] { deviceLoop(d); });
}

void Session::Impl::stopDeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(runMu);
    stopping = true;
    runGen.fetch_add(1);
  }
  runCv.notify_all();
  for (std::thread &th : deviceThreads)
    th.join();
  deviceThreads.clear();
}

void Session::Impl::deviceLoop(size_t d) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (runGen.load(std::memory_order_acquire) == seen) {
      if (++spins < kDeviceSpin) {
        cpuRelax();
        continue;
      }
      std::unique_lock<std::mutex> lock(runMu);
      runCv.wait(lock, [&] { return runGen.load() != seen; });
    }
    seen = runGen.load(std::memory_order_acquire);
    if (stopping.load())
      return;
    runGuarded(d, runTokens);
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(runMu); // orders the notify after the caller's predicate check
      doneCv.notify_one();
    }
  }
}

void Session::Impl::runAll(int64_t t) {
  const int others = static_cast<int>(devs.size()) - 1;
  if (others > 0) {
    runTokens = t;
    pending.store(others, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(runMu);
      runGen.fetch_add(1, std::memory_order_release);
    }
    runCv.notify_all();
  }
  runGuarded(0, t);
  int spins = 0;
  while (pending.load(std::memory_order_acquire) != 0) {
    if (++spins < kDeviceSpin) {
      cpuRelax();
      continue;
    }
    std::unique_lock<std::mutex> lock(runMu);
    doneCv.wait(lock, [&] { return pending.load() == 0; });
  }
}

std::string Session::Impl::checkAll(int64_t t) {
  std::vector<TensorRef> in, out;
  for (size_t d = 0; d < devs.size(); ++d)
    for (size_t s = 0; s < plan.devices[d].steps.size(); ++s) {
      const Step &st = plan.devices[d].steps[s];
      bindStep(d, st, t, in, out);
      std::string e = checkStep(st, in, out, devs[d].kv);
      if (!e.empty())
        return fmt::format("device {} step {} '{}' ({} tokens): {}", d, s, st.name, t, e);
    }
  return checkCollectives(t);
}

std::string Session::Impl::checkCollectives(int64_t t) {
  std::vector<const std::vector<void *> *> ptrs;
  for (const Device &dev : devs)
    ptrs.push_back(&dev.ptr);
  return exec::checkCollectives(plan, ptrs, t);
}

void Session::Impl::runDevice(size_t d, int64_t t) {
  const DevicePlan &dp = plan.devices[d];
  Device &dev = devs[d];
  ThreadGroup &tg = *dev.tg;
  std::vector<TensorRef> in, out;
  const int rank = static_cast<int>(d);
  for (size_t si = 0; si < dp.steps.size(); ++si) {
    const Step &s = dp.steps[si];
    auto t0 = std::chrono::steady_clock::now();
    bindStep(d, s, t, in, out);
    const TensorRef &x = in[0];
    const TensorRef &y = out[0];
    // Collectives meet the other devices here; every other op is the shared host implementation.
    switch (s.op) {
    case OpKind::AllReduce:
      for (size_t i = 0; i < in.size(); ++i)
        opCopy(in[i], out[i]);
      rv->allReduce(rank, out);
      break;
    case OpKind::AllReduceRmsNorm: {
      // The residual joins device 0's addend, so the sum holds it once (y may share r's bytes).
      if (s.ints[0] == 1 && rank == 0)
        opBinary(OpKind::Add, x, in[1], y, tg);
      else
        opCopy(x, y);
      rv->allReduce(rank, {y});
      opRmsNorm(y, s.ints[1] == 1 ? &in.back() : nullptr, out[1], s.floats[0], tg);
      break;
    }
    case OpKind::ReduceScatter:
      rv->reduceScatter(rank, x, y, s.ints[0]);
      break;
    case OpKind::AllGather:
      rv->allGather(rank, x, y, s.ints[0]);
      break;
    default:
      runLocalStep(s, in, out, dev.kv, tg);
      break;
    }
    if (profiling && d == 0) {
      prof[si].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++prof[si].calls;
    }
  }
}

Session::Session() : impl_(std::make_unique<Impl>()) {}
Session::~Session() = default;

Expected<std::unique_ptr<Session>> Session::open(Plan plan, const SessionOptions &opts) {
  using E = Expected<std::unique_ptr<Session>>;
  if (auto errs = validatePlan(plan); !errs.empty())
    return Error{"invalid plan: " + errs[0]};
  std::unique_ptr<Session> s(new Session());
  Impl &m = *s->impl_;
  m.plan = std::move(plan);
  const Plan &p = m.plan;
  const size_t n = p.devices.size();
  m.ctx = opts.ctxSize > 0 ? opts.ctxSize : p.model.defaultCtx;
  if (m.ctx > (int64_t(1) << 26))
    return Error{fmt::format("--ctx-size {} is too large", m.ctx)};
  int threads =
      opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.threadsPerDevice = std::max(1, threads / static_cast<int>(n));

  // The weights' source: memory (tests) or the GGUF checked against the plan and mmapped.
  auto weights = openWeightSource(p, opts);
  if (!weights)
    return Error{weights.message()};
  const uint8_t *src = weights->data;

  // Capacity: every CPU "device" lives in host memory, so all arenas together must fit in RAM.
  {
    uint64_t need = 0;
    for (const DevicePlan &dp : p.devices) {
      auto kv = mulAdd(static_cast<uint64_t>(m.ctx), dp.kvBytesPerToken, dp.weightBytes);
      auto acts = mulAdd(1, dp.activationBytes, dp.hostActivationBytes);
      auto all = kv && acts ? mulAdd(1, *kv, *acts) : std::nullopt;
      auto sum = all ? mulAdd(1, need, *all) : std::nullopt;
      if (!sum)
        return Error{"the plan's memory size overflows"};
      need = *sum;
    }
    const uint64_t ram =
        static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && need > ram)
      return Error{
          fmt::format("the plan needs {:.2f} GiB of host memory for --ctx-size {} but the machine has "
                      "{:.2f} GiB; use a smaller --ctx-size",
                      need / double(1ull << 30), m.ctx, ram / double(1ull << 30))};
  }
  m.devs.resize(n);
  for (size_t d = 0; d < n; ++d) {
    const DevicePlan &dp = p.devices[d];
    Device &dev = m.devs[d];
    auto kvBytes = mulAdd(static_cast<uint64_t>(m.ctx), dp.kvBytesPerToken, 0);
    auto total = kvBytes ? mulAdd(1, dp.weightBytes, *kvBytes) : std::nullopt;
    total = total ? mulAdd(1, *total, dp.activationBytes) : std::nullopt;
    total = total ? mulAdd(1, *total, dp.hostActivationBytes) : std::nullopt;
    if (!total)
      return Error{fmt::format("device {}: memory size overflows", d)};
    if (opts.maxDeviceBytes && *total > opts.maxDeviceBytes)
      return Error{
          fmt::format("device {} needs {} bytes (weights {}, activations {}, KV {} for --ctx-size {}) "
                      "but has {}; use more devices or a smaller --ctx-size",
                      d, *total, dp.weightBytes, dp.activationBytes + dp.hostActivationBytes, *kvBytes,
                      m.ctx, opts.maxDeviceBytes)};
    if (!dev.weights.allocate(dp.weightBytes) || !dev.acts.allocate(dp.activationBytes) ||
        !dev.hostActs.allocate(dp.hostActivationBytes) || !dev.kvMem.allocate(*kvBytes))
      return Error{
          fmt::format("device {}: cannot allocate {} bytes (weights + activations + KV for --ctx-size "
                      "{}); use more devices or a smaller --ctx-size",
                      d, *total, m.ctx)};
    uint64_t at = 0;
    for (const KvCache &c : dp.kv) {
      KvBuffers b;
      b.desc = c;
      b.ctx = m.ctx;
      const uint64_t eb = dtypeBytes(c.dtype);
      b.k = dev.kvMem.data + at;
      at += m.ctx * c.nHeadKv * c.headDimK * eb;
      b.v = dev.kvMem.data + at;
      at += m.ctx * c.nHeadKv * c.headDimV * eb;
      dev.kv.push_back(b);
    }
    dev.tokens.assign(p.model.maxBatch, 0);
    dev.positions.assign(p.model.maxBatch, 0);
    dev.tg = std::make_unique<ThreadGroup>(m.threadsPerDevice);
    StorageBases bases;
    bases.acts = dev.acts.data;
    bases.hostActs = dev.hostActs.data; // both arenas are host memory here, but each has its own offsets
    for (const WeightSlice &w : dp.weights)
      bases.weights.push_back(dev.weights.data + w.offset);
    bases.kv = &dev.kv;
    bases.tokens = dev.tokens.data();
    bases.positions = dev.positions.data();
    if (logitsTensorOf(dp) >= 0) {
      dev.logits.assign(static_cast<size_t>(p.model.maxBatch * p.model.nVocab), 0.0f);
      bases.logits = dev.logits.data();
    }
    dev.ptr = resolveTensors(dp, bases);
    // Copy the weight slices, piece by piece, rows in order.
    const std::vector<WeightSlice> &ws = dp.weights;
    uint8_t *base = dev.weights.data;
    dev.tg->parallelFor(static_cast<int64_t>(ws.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t w = b; w < e; ++w) {
        uint8_t *dst = base + ws[w].offset;
        for (const WeightPiece &pc : ws[w].pieces)
          for (uint64_t r = 0; r < pc.rows; ++r, dst += pc.rowBytes)
            std::memcpy(dst, src + pc.fileOffset + r * pc.rowStride, pc.rowBytes);
      }
    });
  }
  m.logitsTensor = logitsTensorOf(p.devices[0]);
  if (m.logitsTensor < 0)
    return Error{"device 0 has no OUTPUT_LOGITS tensor; recompile the plan"};
  for (int64_t t : {int64_t(1), p.model.maxBatch})
    if (std::string e = m.checkAll(t); !e.empty())
      return Error{"plan does not fit its ops: " + e};
  m.rv = std::make_unique<Rendezvous>(static_cast<int>(n));
  m.prof.resize(p.devices[0].steps.size());
  for (size_t i = 0; i < m.prof.size(); ++i)
    m.prof[i].name = p.devices[0].steps[i].name, m.prof[i].op = p.devices[0].steps[i].op;
  m.startDeviceThreads();
  return E(std::move(s));
}

std::string checkEvaluateArgs(const Plan &plan, int64_t ctx, const std::vector<int32_t> &tokens,
                              const std::vector<int32_t> &positions) {
  if (tokens.size() != positions.size() || tokens.empty())
    return fmt::format("evaluate: {} tokens but {} positions", tokens.size(), positions.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= plan.model.nVocab)
      return fmt::format("token id {} is outside the vocabulary (0..{})", tokens[i], plan.model.nVocab - 1);
    if (positions[i] < 0 || positions[i] >= ctx)
      return fmt::format("position {} is past the context of {} tokens; use a larger --ctx-size (the model "
                         "was trained with {})",
                         positions[i], ctx, plan.model.nCtxTrain);
  }
  return "";
}

Expected<std::vector<float>> Session::evaluate(const std::vector<int32_t> &tokens,
                                               const std::vector<int32_t> &positions) {
  using E = Expected<std::vector<float>>;
  Impl &m = *impl_;
  const Plan &p = m.plan;
  if (!m.failure.empty())
    return Error{"execution failed earlier: " + m.failure + "; reopen the plan"};
  if (std::string bad = checkEvaluateArgs(p, m.ctx, tokens, positions); !bad.empty())
    return Error{bad};
  const int64_t vocab = p.model.nVocab, total = static_cast<int64_t>(tokens.size());
  std::vector<float> logits(static_cast<size_t>(total * vocab));
  for (int64_t at = 0; at < total; at += p.model.maxBatch) {
    const int64_t t = std::min(p.model.maxBatch, total - at);
    for (Device &dev : m.devs) {
      std::copy(tokens.begin() + at, tokens.begin() + at + t, dev.tokens.begin());
      std::copy(positions.begin() + at, positions.begin() + at + t, dev.positions.begin());
    }
    m.runAll(t);
    if (!m.failure.empty())
      return Error{"execution failed: " + m.failure + "; reopen the plan"};
    std::memcpy(logits.data() + at * vocab, m.devs[0].ptr[m.logitsTensor], t * vocab * sizeof(float));
  }
  return logits;
}

const Plan &Session::plan() const { return impl_->plan; }
int64_t Session::ctxSize() const { return impl_->ctx; }
int64_t Session::nVocab() const { return impl_->plan.model.nVocab; }
int Session::threadsPerDevice() const { return impl_->threadsPerDevice; }
std::vector<uint64_t> Session::deviceBytes() const {
  std::vector<uint64_t> out;
  for (const Device &d : impl_->devs)
    out.push_back(d.weights.size + d.acts.size + d.hostActs.size + d.kvMem.size);
  return out;
}
std::vector<float> Session::tensorData(size_t device, int32_t id, int64_t tokens) const {
  const Impl &m = *impl_;
  if (device >= m.devs.size() || id < 0 || static_cast<size_t>(id) >= m.devs[device].ptr.size() ||
      m.plan.devices[device].tensors[id].storage == Storage::Weight)
    return {};
  TensorRef r = m.bind(device, id, tokens);
  std::vector<float> out(static_cast<size_t>(r.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = r.dtype == DType::F32   ? r.f()[i]
             : r.dtype == DType::I32 ? static_cast<float>(r.i()[i])
                                     : halfToFloat(static_cast<const uint16_t *>(r.data)[i]);
  return out;
}

void Session::setProfiling(bool on) { impl_->profiling = on; }
std::vector<StepProfile> Session::profile() const { return impl_->prof; }

} // namespace tpc::rt
