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
#include "runtime/comm/StageCommunicator.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/HostArena.h"
#include "runtime/cpu/KernelChoice.h"
#include "runtime/cpu/ReplicaShares.h"
#include "runtime/cpu/SharedReduceNorm.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/cpu/ops/Ops.h"
#include "runtime/exec/Binding.h"
#include "runtime/exec/Collectives.h"
#include "runtime/exec/MicroBatches.h"
#include "runtime/exec/Setup.h"
#include "runtime/support/Progress.h"
#include "runtime/support/SpinWait.h"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace tpc::rt::cpu {

using exec::KvBuffers;
using exec::TensorRef;

namespace {
struct Device {
  int index = 0; ///< the plan device
  /// hostActs: the plan's host-placed activations. `weights` holds only the copied slices.
  HostArena weights, acts, hostActs, kvMem, logits;
  std::vector<const uint8_t *> inPlace; ///< per weight slice: its bytes in the mapped GGUF, or null (copied)
  std::vector<uint64_t> copyAt;         ///< per weight slice: where a copied one sits in `weights`
  std::vector<KvBuffers> kv;
  std::vector<void *> ptr;                            ///< resolved address of every tensor
  std::vector<int32_t> tokens, positions, seqs, rows; ///< this call's inputs (max_batch each)
  std::unique_ptr<CpuStepRunner> runner;
  std::vector<size_t> batchEnd; ///< matmulBatchEnds: matmuls on one input that run as one job
  /// The step a matmul run applies fused, or 0: gateUpGluSteps' GLU (per tile) or downCombineSteps'
  /// expert_combine (per column range).
  std::vector<size_t> fusedAt;
  /// Per step: a matmul TPC_F32_MATMULS puts on the float32 reference (empty: none named).
  std::vector<char> f32Step;
  std::unique_ptr<ReplicaShares> shares; ///< replicated matmuls split with the peers (prefill)
  /// Per step: an AllReduceRmsNorm that SharedReduceNorm may run (1), and whose sum this device needs only
  /// in its own rows (2: ownRowsSuffice).
  std::vector<char> sharedNorm;
  std::vector<char> unusedGather;        ///< per step: an AllGather into logits nobody reads (device > 0)
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

/// TPC_F32_MATMULS=q6_K,blk.3.ffn_down (a debugging switch, bisecting where precision goes): the matmul
/// steps of `dp` whose weight's ggml type name equals one of the comma-separated patterns or whose GGUF
/// name contains one run as the float32 reference. Empty when the variable is unset.
std::vector<char> f32MatmulSteps(const DevicePlan &dp) {
  const char *env = std::getenv("TPC_F32_MATMULS");
  if (!env || !*env)
    return {};
  std::vector<std::string> pats;
  for (const char *p = env; *p;) {
    const char *e = std::strchr(p, ',');
    const size_t n = e ? static_cast<size_t>(e - p) : std::strlen(p);
    if (n)
      pats.emplace_back(p, n);
    p += n + (e ? 1 : 0);
  }
  std::vector<char> on(dp.steps.size(), 0);
  for (size_t si = 0; si < dp.steps.size(); ++si) {
    const Step &s = dp.steps[si];
    if ((s.op != OpKind::Matmul && s.op != OpKind::MulMatId) || s.inputs.size() < 2)
      continue;
    const TensorDesc &w = dp.tensors[s.inputs[1]];
    if (w.storage != Storage::Weight)
      continue;
    const WeightSlice &ws = dp.weights[w.index];
    for (const std::string &p : pats)
      on[si] |= p == ggmlTypeName(ws.type) || ws.name.find(p) != std::string::npos;
  }
  return on;
}

/// A waiting device thread (or the caller) spins ~20 us, then yields until kDeviceSleepAfter, then blocks
/// (SpinWait.h): between decode steps the caller samples (an argmax over the vocabulary takes longer than
/// 20 us), and a futex wake-up per step is latency on every token.
constexpr int kDeviceSpin = 300;
constexpr auto kDeviceSleepAfter = std::chrono::milliseconds(2);

class CpuSession final : public Session {
public:
  CpuSession(Plan plan, int64_t ctx, int32_t sequences, std::vector<int> devices)
      : Session(std::move(plan), ctx, sequences, std::move(devices)) {}
  ~CpuSession() override { stopDeviceThreads(); }

  /// Everything open() does after exec::prepareOpen: capacity, arenas, weights, threads.
  Expected<void> init(const exec::OpenPlan &o, const SessionOptions &opts);
  /// Copies the slices not read in place and gives their source pages back (after the arenas exist).
  /// `progress`: show each device's copy on stderr where it takes over a second (runtime/support/Progress.h).
  void loadWeights(const exec::WeightSource &src, bool progress);

  const char *backendName() const override { return "CPU"; }
  int threadsPerDevice() const override { return threadsPerDevice_; }
  std::string kernelChoice() const override { return kernelChoice_; }
  /// Fixes the process's kernel level on the first device's decode work (KernelChoice.h), before any step
  /// runs; cache warnings go to stderr.
  void chooseKernels() {
    const Device &d = devs_.front();
    const KernelChoice c = chooseSessionKernels(plan().devices[d.index], d.ptr, ctxSize());
    for (const std::string &w : c.warnings)
      fmt::print(stderr, "warning: {}\n", w);
    kernelChoice_ = c.line();
  }
  std::vector<uint64_t> deviceBytes() const override;
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const override;
  std::vector<int> memoryOf() const override;
  double copyBandwidth(int) const override {
    return hostCopyBandwidth(threadsPerDevice_ * static_cast<int>(devs_.size()));
  }
  double readBandwidth(int) const override {
    return hostReadBandwidth(threadsPerDevice_ * static_cast<int>(devs_.size()));
  }
  std::string memoryName(int) const override { return "host memory"; }
  int hostMemory() const override { return 0; }

protected:
  Expected<void> runChunk(const Chunk &c, float *logits) override;

private:
  /// Runs steps [from, to) of device i (to = SIZE_MAX: to the end).
  Expected<void> runDevice(size_t i, int64_t t, int64_t rows, size_t from = 0, size_t to = SIZE_MAX);
  /// Device i's part of a call cut into micro_ (a pipeline plan): every micro-batch through its steps up to
  /// its trailing receives, then those (stage 0's logits from the last stage) micro-batch by micro-batch.
  Expected<void> runMicroBatches(size_t i);
  /// runDevice (or runMicroBatches) with errors recorded in `failure_` and the communicator aborted, so
  /// peers never hang.
  void runGuarded(size_t i, int64_t t, int64_t rows);
  void startDeviceThreads();
  /// Marks the AllReduceRmsNorm steps SharedReduceNorm may run: the k-th of every device at once, where
  /// every device's operands are safe for it at max_batch.
  void enableSharedReduceNorm();
  void stopDeviceThreads();
  void deviceLoop(size_t i);
  /// Runs every device on `t` tokens and `rows` output rows (the first on the caller) and returns when
  /// all are done.
  void runAll(int64_t t, int64_t rows);

  int threadsPerDevice_ = 1;
  std::string kernelChoice_; ///< chooseKernels()
  int microBatches_ = 1; ///< SessionOptions::microBatches, resolved (1 unless a pipeline plan runs here)
  /// The call being run as micro-batches (empty otherwise), its chunk and where its logits go.
  std::vector<exec::MicroBatch> micro_;
  const Chunk *microChunk_ = nullptr;
  float *microLogits_ = nullptr;
  bool f32All_ = false; ///< SessionOptions::f32Reference
  /// SessionOptions::stepObserver
  std::function<void(int, size_t, const Step &, const std::vector<exec::TensorRef> &,
                     const std::vector<exec::TensorRef> &)>
      observer_;
  std::shared_ptr<const void> weightSource_; ///< the mapped GGUF, while slices are read in place
  std::vector<Device> devs_;                 ///< the session's devices, in plan order
  int32_t logitsTensor_ = -1;                ///< on device 0
  std::shared_ptr<comm::Communicator> comm_;
  CpuCollectiveKernels kernels_;
  std::unique_ptr<exec::CollectiveRunner> collectives_;
  std::unique_ptr<SharedReduceNorm> reduceNorm_; ///< all devices here: AllReduceRmsNorm by rows at prefill
  /// Two or more devices here: their thread groups post dynamic jobs on one board, and a device thread
  /// waiting at a collective (or for the others at the end of a call) runs units of its peers' matmuls.
  std::unique_ptr<HelpBoard> board_;
  struct HelpCtx {
    HelpBoard *board;
    int self;
    static bool help(void *c) {
      auto *h = static_cast<HelpCtx *>(c);
      return h->board->helpOnce(h->self);
    }
  };
  std::vector<HelpCtx> helpCtx_; ///< by position in devs_
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
  int64_t runTokens_ = 0, runRows_ = 0;
};

/// Per step of `dp`: an AllGather whose whole is the device's logits, which no later step reads and the
/// session does not return (`returned`: this device's logits are the caller's).
static std::vector<char> unusedLogitsGathers(const DevicePlan &dp, bool returned) {
  std::vector<char> unused(dp.steps.size(), 0);
  if (returned)
    return unused;
  auto baseOf = [&](int32_t id) {
    for (int hops = 0; dp.tensors[id].storage == Storage::View && hops < 64; ++hops)
      id = dp.tensors[id].index;
    return id;
  };
  auto readsLater = [&](size_t from, int32_t id) {
    for (size_t j = from; j < dp.steps.size(); ++j)
      for (int32_t in : dp.steps[j].inputs)
        if (baseOf(in) == id)
          return true;
    return false;
  };
  for (size_t si = 0; si < dp.steps.size(); ++si) {
    const Step &s = dp.steps[si];
    if (s.op == OpKind::AllGather && s.outputs.size() == 1 &&
        dp.tensors[s.outputs[0]].storage == Storage::OutputLogits && !readsLater(si + 1, s.outputs[0]))
      unused[si] = 1;
  }
  return unused;
}

void CpuSession::runGuarded(size_t i, int64_t t, int64_t rows) {
  // A kernel that throws (it should not: open() checked every step) must neither terminate the process
  // nor leave the peers waiting at a collective.
  Expected<void> ok;
  try {
    ok = micro_.empty() ? runDevice(i, t, rows) : runMicroBatches(i);
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

void CpuSession::enableSharedReduceNorm() {
  const Plan &p = plan();
  const int64_t rows = p.model.maxOutputRows > 0 ? p.model.maxOutputRows : p.model.maxBatch;
  std::vector<char> safe; // per k-th AllReduceRmsNorm, over every device
  for (Device &dev : devs_) {
    const DevicePlan &dp = p.devices[dev.index];
    std::vector<TensorRef> in, out;
    size_t k = 0;
    for (const Step &s : dp.steps) {
      if (s.op != OpKind::AllReduceRmsNorm)
        continue;
      exec::bindOperands(dp, dev.ptr, s, p.model.maxBatch, rows, in, out);
      const bool ok = SharedReduceNorm::operandsSafe(in, out, AllReduceRmsNormParams::read(s));
      if (k >= safe.size())
        safe.push_back(ok ? 1 : 0);
      else
        safe[k] = safe[k] && ok;
      ++k;
    }
    if (k != safe.size())
      return; // checkCollectives guarantees equal sequences; never share on a mismatch
  }
  for (Device &dev : devs_) {
    const DevicePlan &dp = p.devices[dev.index];
    dev.sharedNorm.assign(dp.steps.size(), 0);
    size_t k = 0;
    for (size_t si = 0; si < dp.steps.size(); ++si)
      if (dp.steps[si].op == OpKind::AllReduceRmsNorm)
        dev.sharedNorm[si] = safe[k++];
    // Which shared steps' sums this device needs whole: an observer sees every output; otherwise only
    // where a reader is not the residual of a later shared step (which reads its own rows alone).
    const std::vector<char> own = observer_ ? std::vector<char>(dp.steps.size(), 0) : SharedReduceNorm::ownRowsSuffice(dp, dev.sharedNorm);
    for (size_t si = 0; si < dp.steps.size(); ++si)
      if (dev.sharedNorm[si] && own[si])
        dev.sharedNorm[si] = 2;
  }
  reduceNorm_ = std::make_unique<SharedReduceNorm>(*comm_, static_cast<int>(p.devices.size()));
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
  const ScopedSpinHelp help(board_ ? HelpCtx::help : nullptr, board_ ? &helpCtx_[i] : nullptr);
  uint64_t seen = 0;
  for (;;) {
    waitUntil([&] { return runGen_.load(std::memory_order_acquire) != seen; }, kDeviceSpin, kDeviceSleepAfter,
              [&] {
                std::unique_lock<std::mutex> lock(runMu_);
                runCv_.wait(lock, [&] { return runGen_.load() != seen; });
              });
    seen = runGen_.load(std::memory_order_acquire);
    if (stopping_.load())
      return;
    runGuarded(i, runTokens_, runRows_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(runMu_); // orders the notify after the caller's predicate check
      doneCv_.notify_one();
    }
  }
}

void CpuSession::runAll(int64_t t, int64_t rows) {
  const ScopedSpinHelp help(board_ ? HelpCtx::help : nullptr, board_ ? &helpCtx_[0] : nullptr);
  const int others = static_cast<int>(devs_.size()) - 1;
  if (others > 0) {
    runTokens_ = t;
    runRows_ = rows;
    pending_.store(others, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(runMu_);
      runGen_.fetch_add(1, std::memory_order_release);
    }
    runCv_.notify_all();
  }
  runGuarded(0, t, rows);
  waitUntil([&] { return pending_.load(std::memory_order_acquire) == 0; }, kDeviceSpin, kDeviceSleepAfter,
            [&] {
              std::unique_lock<std::mutex> lock(runMu_);
              doneCv_.wait(lock, [&] { return pending_.load() == 0; });
            });
}

Expected<void> CpuSession::runMicroBatches(size_t i) {
  Device &dev = devs_[i];
  const DevicePlan &dp = plan().devices[dev.index];
  const Chunk &c = *microChunk_;
  // The trailing receives wait for the last stage; deferred, this stage hands micro-batch k on and goes on
  // with k + 1 meanwhile (the in-process mailbox buffers the sends, so no stage waits for a receiver).
  size_t tail = dp.steps.size();
  while (tail > 0 && dp.steps[tail - 1].op == OpKind::Recv)
    --tail;
  auto load = [&](const exec::MicroBatch &m) {
    std::copy(c.tokens + m.first, c.tokens + m.first + m.t, dev.tokens.begin());
    std::copy(c.positions + m.first, c.positions + m.first + m.t, dev.positions.begin());
    std::copy(c.seqs + m.first, c.seqs + m.first + m.t, dev.seqs.begin());
    std::copy(m.rows.begin(), m.rows.end(), dev.rows.begin());
    dev.runner->forgetInputs();
  };
  for (const exec::MicroBatch &m : micro_) {
    load(m);
    if (Expected<void> ok = runDevice(i, m.t, int64_t(m.rows.size()), 0, tail); !ok)
      return ok;
  }
  if (tail == dp.steps.size())
    return {};
  const int64_t vocab = plan().model.nVocab;
  for (const exec::MicroBatch &m : micro_) {
    load(m);
    if (Expected<void> ok = runDevice(i, m.t, int64_t(m.rows.size()), tail); !ok)
      return ok;
    if (dev.index == 0 && microLogits_ && !m.dropRow) { // this micro-batch's rows of the call's logits
      const TensorRef l = exec::bindTensor(dp, dev.ptr, logitsTensor_, m.t, int64_t(m.rows.size()));
      std::memcpy(microLogits_ + m.firstRow * vocab, l.data, static_cast<size_t>(l.numel()) * sizeof(float));
    }
  }
  return {};
}

Expected<void> CpuSession::runDevice(size_t i, int64_t t, int64_t rows, size_t from, size_t to) {
  Device &dev = devs_[i];
  const DevicePlan &dp = plan().devices[dev.index];
  const bool prof = profiling(); // device i's own record: only this thread books into it
  std::vector<TensorRef> in, out;
  std::vector<std::vector<TensorRef>> bins, bouts;
  std::vector<const Step *> bsteps;
  for (size_t si = from; si < std::min(to, dp.steps.size()); ++si) {
    const Step &s = dp.steps[si];
    auto t0 = std::chrono::steady_clock::now();
    if (const size_t end = dev.batchEnd[si], fused = dev.fusedAt[si];
        end > si + 1 || fused || dev.shares->shares(s, t)) {
      // Matmuls on one input (Q/K/V, gate/up) as one job, a gate/up with its GLU applied per tile, a MoE
      // down projection with its expert_combine applied per column range; the profile books it on the
      // first step. Replicated matmuls among them compute this device's rows only and gather the peers'
      // (ReplicaShares).
      bins.resize(end - si);
      bouts.resize(end - si);
      bsteps.clear();
      for (size_t j = si; j < end; ++j) {
        bsteps.push_back(&dp.steps[j]);
        exec::bindOperands(dp, dev.ptr, dp.steps[j], t, rows, bins[j - si], bouts[j - si]);
      }
      if (fused)
        exec::bindOperands(dp, dev.ptr, dp.steps[fused], t, rows, in, out);
      else
        dev.shares->prepare(bsteps, bins, bouts, t);
      if (Expected<void> ok = dev.runner->runBatch(bsteps, bins, bouts, fused ? &dp.steps[fused] : nullptr,
                                                   fused ? &in : nullptr, fused ? &out[0] : nullptr);
          !ok)
        return ok;
      if (!fused) {
        std::vector<TensorRef> gathered;
        if (Expected<void> ok = dev.shares->gather(bins, bouts, gathered); !ok)
          return ok;
        dev.runner->noteWrites(gathered);
      }
      if (observer_) // never fused: fusion is off when steps are observed
        for (size_t j = 0; j < bsteps.size(); ++j)
          observer_(dev.index, si + j, *bsteps[j], bins[j], bouts[j]);
      if (prof)
        recordStep(si, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), i);
      si = fused ? fused : end - 1;
      continue;
    }
    exec::bindOperands(dp, dev.ptr, s, t, rows, in, out);
    Expected<void> ok;
    if (isStageTransfer(s.op)) {
      // The hidden state (or the logits) to or from this device's peer on another pipeline stage.
      const TensorRef &v = s.op == OpKind::Send ? in[0] : out[0];
      const comm::ElemType type = v.dtype == DType::F16   ? comm::ElemType::F16
                                  : v.dtype == DType::I32 ? comm::ElemType::I32
                                                          : comm::ElemType::F32;
      const int peer = static_cast<int>(TransferParams::read(s).peer);
      ok = s.op == OpKind::Send ? comm_->send(dev.index, peer, {v.data, v.numel()}, type)
                                : comm_->recv(dev.index, peer, {v.data, v.numel()}, type);
      dev.runner->noteWrites(out);
    } else if (isCollective(s.op)) {
      if (reduceNorm_ && dev.sharedNorm[si] && t >= SharedReduceNorm::kMinRows)
        ok = reduceNorm_->run(dev.index, in, out, AllReduceRmsNormParams::read(s), dev.runner->threadGroup(),
                              dev.sharedNorm[si] == 1);
      else
        ok = collectives_->run({{dev.index, si, &in, &out, nullptr, dev.unusedGather[si] != 0}}, t, rows);
      // The runner keeps converted inputs until their memory is written; a communicator may also use its
      // input buffers as scratch, so both count as written.
      dev.runner->noteWrites(in);
      dev.runner->noteWrites(out);
    } else {
      if (!dev.f32Step.empty())
        dev.runner->setF32Reference(f32All_ || dev.f32Step[si]);
      ok = dev.runner->run(s, in, out, dev.kv);
    }
    if (!ok)
      return ok;
    if (observer_)
      observer_(dev.index, si, s, in, out);
    if (prof)
      recordStep(si, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), i);
  }
  return {};
}

Expected<void> CpuSession::runChunk(const Chunk &c, float *logits) {
  if (microBatches_ > 1 && c.t > 1) {
    micro_ = exec::splitMicroBatches(c.t, c.rows, c.r, microBatches_);
    microChunk_ = &c;
    microLogits_ = logits;
    runAll(c.t, c.r);
    micro_.clear();
    return failure_.empty() ? Expected<void>{} : Error{failure_};
  }
  for (Device &dev : devs_) {
    std::copy(c.tokens, c.tokens + c.t, dev.tokens.begin());
    std::copy(c.positions, c.positions + c.t, dev.positions.begin());
    std::copy(c.seqs, c.seqs + c.t, dev.seqs.begin());
    std::copy(c.rows, c.rows + c.r, dev.rows.begin());
    dev.runner->forgetInputs(); // a new chunk: nothing converted in the last one is read again
  }
  runAll(c.t, c.r);
  if (!failure_.empty())
    return Error{failure_};
  if (logits) { // devs_[0] is device 0 whenever the session returns logits
    const TensorRef l = exec::bindTensor(plan().devices[0], devs_[0].ptr, logitsTensor_, c.t, c.r);
    std::memcpy(logits, l.data, static_cast<size_t>(l.numel()) * sizeof(float));
  }
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
    auto b = exec::arenaBytes(p.devices[d], d, ctx, o.sequences, p.model.maxBatch);
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
  // Weights and KV caches on 2 MiB pages (HostArena.h says why) unless the options or the kernel say no.
  const bool huge = opts.hugePages && hugePagesUsable();
  devs_.resize(o.devices.size());
  for (size_t i = 0; i < devs_.size(); ++i) {
    const int d = o.devices[i];
    const DevicePlan &dp = p.devices[d];
    const exec::ArenaBytes &z = sizes[i];
    Device &dev = devs_[i];
    dev.index = d;
    if (std::string e = exec::checkDeviceCapacity(d, z, ctx, opts.maxDeviceBytes); !e.empty())
      return Error{e};
    // The float32 reference (and f32KvCache) keeps f32 KV caches: the same layout over F32 descriptors.
    const bool kvF32 = opts.f32Reference || opts.f32KvCache;
    DevicePlan kvPlan;
    kvPlan.kv = dp.kv;
    if (kvF32)
      for (KvCache &c : kvPlan.kv)
        c.typeK = c.typeV = GGMLType::F32; // a quantized cache too: the reference has no rounding there
    const std::vector<exec::KvPlacement> layout = exec::kvLayout(kvPlan, ctx, o.sequences, p.model.maxBatch);
    uint64_t kvBytes = z.kv;
    if (kvF32 && !layout.empty()) {
      kvBytes = layout.back().vOffset + static_cast<uint64_t>(layout.back().positions) * o.sequences *
                                            kvCellBytesV(kvPlan.kv.back());
    }
    // Slices read in place need no arena bytes; the copied ones are packed at the plan's 64-byte spacing.
    // On huge pages every slice is copied: the page cache maps a file in 4 KiB pages.
    uint64_t copied = 0;
    for (const WeightSlice &w : dp.weights) {
      dev.inPlace.push_back(opts.weightsInPlace && !huge ? exec::weightInPlace(w, o.weights) : nullptr);
      dev.copyAt.push_back(copied);
      if (!dev.inPlace.back())
        copied += (w.bytes + 63) / 64 * 64;
    }
    // Activations stay on 4 KiB pages: a short prompt touches a few rows of each max_batch-sized slot.
    if (!dev.weights.allocate(copied, huge) || !dev.acts.allocate(z.acts) ||
        !dev.hostActs.allocate(z.hostActs) || !dev.kvMem.allocate(kvBytes, huge))
      return Error{
          fmt::format("device {}: cannot allocate {} bytes (weights + activations + KV for --ctx-size "
                      "{} x {} sequence(s)); use more devices or a smaller --ctx-size",
                      d, z.total, ctx, o.sequences)};
    dev.tokens.assign(p.model.maxBatch, 0);
    dev.positions.assign(p.model.maxBatch, 0);
    dev.seqs.assign(p.model.maxBatch, 0);
    dev.rows.assign(p.model.maxBatch, 0);
    for (size_t k = 0; k < dp.kv.size(); ++k) {
      KvBuffers b;
      b.desc = kvPlan.kv[k];
      b.ctx = layout[k].positions;
      b.sequences = o.sequences;
      b.seq = dev.seqs.data();
      b.k = dev.kvMem.data + layout[k].kOffset;
      b.v = dev.kvMem.data + layout[k].vOffset;
      dev.kv.push_back(b);
    }
    dev.runner = std::make_unique<CpuStepRunner>(threadsPerDevice_);
    dev.runner->enableActivationCache(); // every write of this device goes through runDevice
    dev.runner->setF32Reference(opts.f32Reference);
    f32All_ = opts.f32Reference;
    observer_ = opts.stepObserver;
    dev.batchEnd = matmulBatchEnds(dp);
    dev.f32Step = f32MatmulSteps(dp);
    // The GLU fused into its gate/up job (MoE or dense), expert_combine into the MoE down projection
    // (runtime fusions, like the batches and the activation cache: no plan change, and host or hand-built
    // plans gain them too). Off where each step's output must exist: an observer, or f32 reference matmuls.
    dev.fusedAt = gateUpGluSteps(dp, dev.batchEnd);
    const std::vector<size_t> combines = downCombineSteps(dp, dev.batchEnd);
    for (size_t si = 0; si < combines.size(); ++si)
      if (!dev.fusedAt[si])
        dev.fusedAt[si] = combines[si];
    dev.unusedGather = unusedLogitsGathers(dp, i == 0 && d == 0);
    if (observer_ || opts.f32Reference || !dev.f32Step.empty())
      std::fill(dev.fusedAt.begin(), dev.fusedAt.end(), 0);
    if (!dev.f32Step.empty()) // step by step, each with its own mode
      for (size_t si = 0; si < dev.batchEnd.size(); ++si)
        dev.batchEnd[si] = si + 1;

    exec::StorageBases bases;
    bases.acts = dev.acts.data;
    bases.hostActs = dev.hostActs.data; // both arenas are host memory here, but each has its own offsets
    for (size_t w = 0; w < dp.weights.size(); ++w) // kernels only read weights: the read-only mapping serves
      bases.weights.push_back(dev.inPlace[w] ? const_cast<uint8_t *>(dev.inPlace[w])
                                             : dev.weights.data + dev.copyAt[w]);
    bases.kv = &dev.kv;
    bases.tokens = dev.tokens.data();
    bases.positions = dev.positions.data();
    bases.rows = dev.rows.data();
    if (exec::logitsTensorOf(dp) >= 0) {
      // The rows a call computes: max_output_rows, or every token for a plan without the rows input.
      const int64_t rows = p.model.maxOutputRows > 0 ? p.model.maxOutputRows : p.model.maxBatch;
      if (!dev.logits.allocate(static_cast<uint64_t>(rows * p.model.nVocab) * sizeof(float)))
        return Error{fmt::format("device {}: cannot allocate the logits rows of {} tokens", d, rows)};
      bases.logits = dev.logits.data;
    }
    dev.ptr = exec::resolveTensors(dp, bases);
    kernels_.setThreads(d, &dev.runner->threadGroup());
  }
  markPhase(opts.timeline, "arenas");
  loadWeights(o.weights, opts.progress);
  markPhase(opts.timeline, "weights");
  logitsTensor_ = exec::logitsTensorOf(p.devices[0]);
  const int nDevices = static_cast<int>(p.devices.size());
  if (opts.comm)
    comm_ = opts.comm;
  else if (p.stages > 1) // collectives inside each stage, Send/Recv between them
    comm_ = comm::StageCommunicator::inProcess(nDevices, static_cast<int>(p.stages));
  else
    comm_ = std::make_shared<comm::InProcessCommunicator>(nDevices);
  if (Expected<void> ok = exec::setCommPayload(p, opts, *comm_); !ok)
    return ok;
  collectives_ = std::make_unique<exec::CollectiveRunner>(p, *comm_, kernels_);
  // Shared memory makes a gather cheaper than the rows it saves; across processes it would not be. Both
  // shared paths meet every device of the plan, so a pipeline plan (devices of different stages run
  // different layers) takes the communicator's collectives instead.
  const bool allLocal = devs_.size() == p.devices.size() && devs_.size() > 1 && p.stages <= 1;
  // Micro-batches need sends that do not wait for their receiver (the in-process mailbox, MPI's copied
  // Isends): a blocking send of micro-batch k + 1 would wait for a stage that is itself waiting to hand
  // back the logits of micro-batch k.
  if (p.stages > 1 && comm_->buffersSends())
    microBatches_ = opts.microBatches > 0 ? opts.microBatches : static_cast<int>(p.stages);
  for (Device &dev : devs_)
    dev.shares = std::make_unique<ReplicaShares>(allLocal ? comm_.get() : nullptr, dev.index,
                                                 static_cast<int>(p.devices.size()));
  if (allLocal)
    enableSharedReduceNorm();
  // TPC_CPU_PEER_HELP=0 turns the board off (A/B measurements; results are the same bits either way).
  const char *helpEnv = std::getenv("TPC_CPU_PEER_HELP");
  if (devs_.size() > 1 && !(helpEnv && std::string(helpEnv) == "0")) {
    board_ = std::make_unique<HelpBoard>(static_cast<int>(devs_.size()));
    for (size_t i = 0; i < devs_.size(); ++i) {
      devs_[i].runner->threadGroup().attachBoard(*board_, static_cast<int>(i));
      helpCtx_.push_back({board_.get(), static_cast<int>(i)});
    }
  }
  startDeviceThreads();
  markPhase(opts.timeline, "threads");
  return {};
}

void CpuSession::loadWeights(const exec::WeightSource &src, bool progress) {
  // Copy the slices that cannot be read in place, piece by piece, rows in order, on each device's threads.
  // Each copied slice's source pages leave the process as soon as it is copied: released only after all
  // copies, the whole copied part of the file was resident next to its copy at the peak (a 2-device MoE
  // plan, whose expert slices have gaps, peaked at twice its weights).
  // Units of at most 8 MiB, claimed dynamically: a vocabulary-sized slice (Gemma 3's 178 MB embedding) is
  // spread over the threads instead of being one thread's copy.
  struct Unit {
    const WeightPiece *piece;
    uint64_t r0, r1;
    uint8_t *dst;
  };
  constexpr uint64_t kUnitBytes = 8 << 20;
  for (Device &dev : devs_) {
    const std::vector<WeightSlice> &ws = plan().devices[dev.index].weights;
    std::vector<Unit> units;
    for (size_t w = 0; w < ws.size(); ++w) {
      if (dev.inPlace[w])
        continue;
      uint8_t *dst = dev.weights.data + dev.copyAt[w];
      for (const WeightPiece &pc : ws[w].pieces) {
        const uint64_t step = std::max<uint64_t>(1, kUnitBytes / std::max<uint64_t>(1, pc.rowBytes));
        for (uint64_t r = 0; r < pc.rows; r += step)
          units.push_back({&pc, r, std::min(pc.rows, r + step), dst + r * pc.rowBytes});
        dst += pc.rows * pc.rowBytes;
      }
    }
    uint64_t bytes = 0;
    for (const Unit &u : units)
      bytes += (u.r1 - u.r0) * u.piece->rowBytes;
    Progress shown(fmt::format("loading weights, device {}", dev.index), bytes, "bytes", progress);
    dev.runner->threadGroup().parallelDynamic(static_cast<int64_t>(units.size()), [&](int64_t u, int) {
      exec::copyWeightRowsReleasing(*units[u].piece, units[u].r0, units[u].r1, src, units[u].dst);
      shown.add((units[u].r1 - units[u].r0) * units[u].piece->rowBytes);
    });
    shown.finish();
  }
  if (!src.mapping)
    return;
  // The in-place slices, which every call reads again, lose the open's read-once hint.
  ::madvise(const_cast<uint8_t *>(src.data), src.size, MADV_NORMAL);
  // Then only their pages stay: a rank of an MPI job maps the whole GGUF, and the copies' edge pages and
  // the pages the kernel maps around each fault belong to the other ranks' slices.
  std::vector<std::pair<uint64_t, uint64_t>> keep;
  for (const Device &dev : devs_)
    for (size_t w = 0; w < dev.inPlace.size(); ++w)
      if (dev.inPlace[w])
        keep.emplace_back(dev.inPlace[w] - src.data,
                          dev.inPlace[w] - src.data + plan().devices[dev.index].weights[w].bytes);
  if (keep.empty())
    return; // everything copied: the mapping goes with the open, and the session no longer needs the file
  exec::releasePagesOutside(std::move(keep), src);
  weightSource_ = src.mapping; // in-place slices read the mapping until the session closes
}

std::vector<uint64_t> CpuSession::deviceBytes() const {
  std::vector<uint64_t> out;
  for (const Device &d : devs_)
    out.push_back(d.weights.size + d.acts.size + d.hostActs.size + d.kvMem.size + d.logits.size);
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
  TensorRef r = exec::bindTensor(plan().devices[device], dev->ptr, id, tokens, lastRows());
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
  if (std::string bad = isaOverrideProblem(std::getenv("TPC_CPU_ISA")); !bad.empty())
    return Error{bad};
  if (std::string bad = calibrateModeProblem(std::getenv("TPC_CPU_CALIBRATE")); !bad.empty())
    return Error{bad};
  auto o = exec::prepareOpen(plan, opts);
  if (!o)
    return Error{o.message()};
  const int64_t ctx = o->ctx;
  std::vector<int> devices = o->devices;
  auto s = std::make_unique<CpuSession>(std::move(plan), ctx, o->sequences, std::move(devices));
  if (Expected<void> ok = s->init(*o, opts); !ok)
    return Error{ok.message()};
  s->chooseKernels();
  return E(std::unique_ptr<Session>(std::move(s)));
}

} // namespace tpc::rt::cpu
