//===- Communicators.cpp - loopback and NCCL communicators of the CUDA backend ===//
//
// GpuCommunicator holds what both share (argument checks, staging buffers, the abort latch, all-gather
// and reduce-scatter built on the sum); LoopbackCommunicator and NcclCommunicator implement the sum and
// the broadcast copy. CUDA failures inside a call become its error (and abort the communicator: its
// buffers then hold garbage).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/Communicators.h"

#include "runtime/cuda/Collective.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/Nccl.h"

#include <fmt/core.h>

#include <algorithm>
#include <mutex>

namespace tpc::rt::cuda {

namespace {

using comm::AxisParts;
using comm::ElemType;

cudaStream_t streamOf(void *s) { return static_cast<cudaStream_t>(s); }

/// One rank's part of a sum: out[i] = Σ over the ranks of in[i] (in[i] may be out[i]).
struct SumEntry {
  int rank = 0;
  cudaStream_t stream = nullptr;
  std::vector<const float *> in;
  std::vector<float *> out;
};
cudaStream_t streamOf(const SumEntry &e) { return e.stream; }
cudaStream_t streamOf(const comm::BroadcastEntry &e) { return streamOf(e.stream); }

/// The shared part (see the file comment of Communicators.h).
class GpuCommunicator : public comm::Communicator {
public:
  ~GpuCommunicator() override {
    for (size_t r = 0; r < events_.size(); ++r)
      if (events_[r]) {
        cudaSetDevice(gpus_[r]);
        cudaEventDestroy(events_[r]);
      }
  }

  int size() const override { return static_cast<int>(gpus_.size()); }
  std::vector<int> localRanks() const override {
    std::vector<int> r(gpus_.size());
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = static_cast<int>(i);
    return r;
  }
  bool streamOrdered() const override { return true; }

  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;

  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &local, ElemType type) override {
    auto es = ordered("all-reduce", local);
    if (!es)
      return Error{es.message()};
    if (type != ElemType::F32)
      return fail(fmt::format("all-reduce: sums of {} are not supported (f32 only)", elemTypeName(type)));
    std::vector<int64_t> counts;
    for (const comm::Buffer &b : (*es)[0].bucket)
      counts.push_back(b.count);
    std::vector<SumEntry> sums;
    for (const comm::AllReduceEntry &e : *es) {
      if (e.bucket.size() != counts.size())
        return fail(fmt::format("all-reduce: rank {} reduces {} tensors, rank 0 {}", e.rank, e.bucket.size(),
                                counts.size()));
      SumEntry s{e.rank, streamOf(e.stream), {}, {}};
      for (size_t i = 0; i < counts.size(); ++i) {
        if (e.bucket[i].count != counts[i])
          return fail(fmt::format("all-reduce: tensor {} has {} elements on rank {}, {} on rank 0", i,
                                  e.bucket[i].count, e.rank, counts[i]));
        s.in.push_back(static_cast<const float *>(e.bucket[i].data));
        s.out.push_back(static_cast<float *>(e.bucket[i].data));
      }
      sums.push_back(std::move(s));
    }
    return guarded("all-reduce", [&] { sum(sums, counts, payload_ == comm::Payload::BF16); });
  }

  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &local, const AxisParts &layout,
                           ElemType type) override {
    auto es = orderedParts("all-gather", local, layout, type, [](const auto &e) { return e.part.count; });
    if (!es)
      return Error{es.message()};
    const int64_t total = layout.total(), inner = layout.inner;
    return guarded("all-gather", [&] {
      std::vector<SumEntry> sums;
      for (const comm::AllGatherEntry &e : *es) {
        TPC_CUDA_CHECK(cudaSetDevice(gpus_[e.rank]));
        const cudaStream_t st = streamOf(e.stream);
        const uint64_t partBytes = uint64_t(e.part.count) * 4, width = layout.parts[e.rank] * inner * 4;
        if (partBytes)
          TPC_CUDA_CHECK(
              cudaMemcpyAsync(stage_[e.rank].p, e.part.data, partBytes, cudaMemcpyDeviceToDevice, st));
        if (e.whole.count)
          TPC_CUDA_CHECK(cudaMemsetAsync(e.whole.data, 0, uint64_t(e.whole.count) * 4, st));
        if (width && layout.outer)
          TPC_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<float *>(e.whole.data) + layout.offset(e.rank) * inner,
                                           total * inner * 4, stage_[e.rank].p, width, width, layout.outer,
                                           cudaMemcpyDeviceToDevice, st));
        float *whole = static_cast<float *>(e.whole.data);
        sums.push_back({e.rank, st, {whole}, {whole}});
      }
      sum(sums, {layout.outer * total * inner}, false);
    });
  }

  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &local, const AxisParts &layout,
                               ElemType type) override {
    auto es =
        orderedParts("reduce-scatter", local, layout, type, [](const auto &e) { return e.whole.count; });
    if (!es)
      return Error{es.message()};
    const int64_t total = layout.total(), inner = layout.inner;
    return guarded("reduce-scatter", [&] {
      std::vector<SumEntry> sums;
      for (const comm::ReduceScatterEntry &e : *es)
        sums.push_back({e.rank,
                        streamOf(e.stream),
                        {static_cast<const float *>(e.whole.data)},
                        {reinterpret_cast<float *>(stage_[e.rank].p)}});
      sum(sums, {layout.outer * total * inner}, false);
      for (const comm::ReduceScatterEntry &e : *es) { // each rank keeps its part of the summed whole
        const uint64_t width = layout.parts[e.rank] * inner * 4;
        if (!width || !layout.outer)
          continue;
        TPC_CUDA_CHECK(cudaSetDevice(gpus_[e.rank]));
        TPC_CUDA_CHECK(cudaMemcpy2DAsync(
            e.part.data, width, reinterpret_cast<float *>(stage_[e.rank].p) + layout.offset(e.rank) * inner,
            total * inner * 4, width, layout.outer, cudaMemcpyDeviceToDevice, streamOf(e.stream)));
      }
    });
  }

  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &local, int root, ElemType type) override {
    auto es = ordered("broadcast", local);
    if (!es)
      return Error{es.message()};
    if (root < 0 || root >= size())
      return fail(fmt::format("broadcast: root {} is outside 0..{}", root, size() - 1));
    for (const comm::BroadcastEntry &e : *es)
      if (e.buf.count != (*es)[root].buf.count)
        return fail(fmt::format("broadcast: rank {} receives {} elements, the root sends {}", e.rank,
                                e.buf.count, (*es)[root].buf.count));
    const uint64_t bytes = uint64_t((*es)[root].buf.count) * comm::elemBytes(type);
    return guarded("broadcast", [&] {
      if (bytes)
        copyFromRoot(*es, root, bytes);
    });
  }

  Expected<void> barrier(const std::vector<int> &ranks) override {
    // Every rank is in this one call, so all have arrived; the streams order the work.
    std::vector<comm::BroadcastEntry> es;
    for (int r : ranks)
      es.push_back({r, {}, nullptr});
    if (auto ok = ordered("barrier", es); !ok)
      return Error{ok.message()};
    return {};
  }

  void abort(const std::string &reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_)
      reason_ = reason;
    aborted_ = true;
  }
  bool aborted() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }

protected:
  /// Makes one event and one staging buffer per rank (rank r on gpus[r]); throws CudaError.
  GpuCommunicator(std::vector<int> gpus, const std::vector<uint64_t> &stageBytes)
      : gpus_(std::move(gpus)), stage_(gpus_.size()), events_(gpus_.size(), nullptr) {
    for (size_t r = 0; r < gpus_.size(); ++r) {
      TPC_CUDA_CHECK(stage_[r].allocate(gpus_[r], r < stageBytes.size() ? stageBytes[r] : 0));
      TPC_CUDA_CHECK(cudaEventCreateWithFlags(&events_[r], cudaEventDisableTiming));
    }
  }

  /// Enqueues the sums; `ranks` holds every rank, ascending; tensor i has counts[i] elements.
  /// `bf16`: the all-reduce's bf16 payload rule (only where supportsPayload(BF16); gathers and scatters,
  /// which must stay exact, pass false).
  virtual void sum(const std::vector<SumEntry> &ranks, const std::vector<int64_t> &counts, bool bf16) = 0;
  /// Enqueues the copy of the root's first `bytes` into every other rank's buffer (every rank, ascending).
  virtual void copyFromRoot(const std::vector<comm::BroadcastEntry> &ranks, int root, uint64_t bytes) = 0;

  /// Rank r's stream waits until every peer's stream reached this point (`ranks`: every rank).
  template <typename E> void joinInto(const std::vector<E> &ranks, int r) {
    for (const E &e : ranks)
      if (e.rank != r) {
        TPC_CUDA_CHECK(cudaEventRecord(events_[e.rank], streamOf(e)));
        TPC_CUDA_CHECK(cudaStreamWaitEvent(streamOf(ranks[r]), events_[e.rank], 0));
      }
  }
  /// Every peer's stream waits until rank r's stream reached this point.
  template <typename E> void forkFrom(const std::vector<E> &ranks, int r) {
    if (ranks.size() < 2)
      return;
    TPC_CUDA_CHECK(cudaEventRecord(events_[r], streamOf(ranks[r])));
    for (const E &e : ranks)
      if (e.rank != r)
        TPC_CUDA_CHECK(cudaStreamWaitEvent(streamOf(e), events_[r], 0));
  }

  std::vector<int> gpus_;

private:
  Error fail(const std::string &why) {
    abort(why);
    return Error{fmt::format("{} communicator: {}", name(), why)};
  }

  /// The entries sorted by rank when they name every rank exactly once and the communicator was not
  /// aborted; else the error (one call must cover all ranks: the sum is one kernel or one NCCL group).
  template <typename E> Expected<std::vector<E>> ordered(const char *what, const std::vector<E> &local) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return Error{fmt::format("{} communicator aborted: {}", name(), reason_)};
    }
    std::vector<E> es = local;
    std::sort(es.begin(), es.end(), [](const E &a, const E &b) { return a.rank < b.rank; });
    bool every = es.size() == gpus_.size();
    for (size_t i = 0; every && i < es.size(); ++i)
      every = es[i].rank == static_cast<int>(i);
    if (!every)
      return fail(fmt::format("{}: one call must cover every rank 0..{} once (the CUDA backend drives all of "
                              "them from one thread); got {} entries",
                              what, size() - 1, local.size()));
    return es;
  }

  /// ordered(), then the checks of a gather / scatter: f32 only (both are built on the sum), the layout,
  /// and room in each rank's staging buffer for `staged(entry)` elements.
  template <typename E, typename S>
  Expected<std::vector<E>> orderedParts(const char *what, const std::vector<E> &local,
                                        const AxisParts &layout, ElemType type, S staged) {
    auto es = ordered(what, local);
    if (!es)
      return es;
    if (type != ElemType::F32)
      return fail(fmt::format("{}: {} is not supported (f32 only: it is built on the sum)", what,
                              elemTypeName(type)));
    for (const E &e : *es)
      if (std::string bad = checkLayout(layout, e.rank, e.part.count, e.whole.count, staged(e)); !bad.empty())
        return fail(fmt::format("{}: {}", what, bad));
    return es;
  }

  /// "" when the layout has one part per rank, rank `rank` passes its sizes and its staging holds
  /// `staged` elements.
  std::string checkLayout(const AxisParts &layout, int rank, int64_t partCount, int64_t wholeCount,
                          int64_t staged) const {
    if (layout.parts.size() != gpus_.size())
      return fmt::format("the axis layout has {} parts for {} ranks", layout.parts.size(), gpus_.size());
    if (partCount != layout.outer * layout.parts[rank] * layout.inner ||
        wholeCount != layout.outer * layout.total() * layout.inner)
      return fmt::format("rank {} passes {} / {} elements for its part / the whole, the layout says {} / {}",
                         rank, partCount, wholeCount, layout.outer * layout.parts[rank] * layout.inner,
                         layout.outer * layout.total() * layout.inner);
    if (uint64_t(staged) * 4 > stage_[rank].size)
      return fmt::format("rank {} needs {} bytes of staging, the communicator was made with {}", rank,
                         uint64_t(staged) * 4, stage_[rank].size);
    return "";
  }

  /// Runs `enqueue`; a CUDA or NCCL failure becomes the call's error and aborts the communicator.
  template <typename F> Expected<void> guarded(const char *what, F &&enqueue) {
    try {
      enqueue();
    } catch (const CudaError &e) {
      return fail(fmt::format("{}: {}", what, e.what()));
    }
    return {};
  }

  std::vector<GpuAlloc> stage_;
  std::vector<cudaEvent_t> events_;
  mutable std::mutex mu_;
  bool aborted_ = false;
  std::string reason_;
};

/// Logical devices on one GPU: the loopback kernel on rank 0's stream, joined with the peers by events.
class LoopbackCommunicator final : public GpuCommunicator {
public:
  LoopbackCommunicator(int gpu, int ranks, const std::vector<uint64_t> &stageBytes)
      : GpuCommunicator(std::vector<int>(ranks, gpu), stageBytes) {}
  const char *name() const override { return "loopback"; }
  bool supportsPayload(comm::Payload) const override { return true; }

protected:
  void sum(const std::vector<SumEntry> &ranks, const std::vector<int64_t> &counts, bool bf16) override {
    TPC_CUDA_CHECK(cudaSetDevice(gpus_[0]));
    joinInto(ranks, 0);
    for (size_t i = 0; i < counts.size(); ++i) {
      LoopbackArgs a;
      a.n = static_cast<int>(ranks.size());
      a.count = counts[i];
      a.bf16 = bf16;
      for (size_t r = 0; r < ranks.size(); ++r)
        a.in[r] = ranks[r].in[i], a.out[r] = ranks[r].out[i];
      launchLoopbackAllReduce(a, ranks[0].stream);
    }
    forkFrom(ranks, 0);
  }
  void copyFromRoot(const std::vector<comm::BroadcastEntry> &ranks, int root, uint64_t bytes) override {
    TPC_CUDA_CHECK(cudaSetDevice(gpus_[0]));
    joinInto(ranks, root);
    for (const comm::BroadcastEntry &e : ranks)
      if (e.rank != root)
        TPC_CUDA_CHECK(cudaMemcpyAsync(e.buf.data, ranks[root].buf.data, bytes, cudaMemcpyDeviceToDevice,
                                       streamOf(ranks[root].stream)));
    forkFrom(ranks, root);
  }
};

/// Distinct GPUs: one NCCL group per call, each rank's part on its own stream.
class NcclCommunicator final : public GpuCommunicator {
public:
  NcclCommunicator(std::unique_ptr<NcclComms> nccl, std::vector<int> gpus, const std::vector<uint64_t> &stage)
      : GpuCommunicator(std::move(gpus), stage), nccl_(std::move(nccl)) {}
  const char *name() const override { return "nccl"; }

protected:
  // f32 payloads only (supportsPayload): NCCL's bf16 sum would add in bf16, in its ring order; an exact
  // f32 rank-order sum of bf16 addends needs an all-gather of them and a summing kernel (not built yet).
  void sum(const std::vector<SumEntry> &ranks, const std::vector<int64_t> &counts, bool bf16) override {
    TPC_CUDA_ASSERT(!bf16, "nccl communicator: bf16 payloads are not supported");
    group([&] {
      for (const SumEntry &e : ranks)
        for (size_t i = 0; i < counts.size(); ++i)
          if (counts[i] > 0)
            nccl_->allReduce(e.rank, e.in[i], e.out[i], counts[i], e.stream);
    });
  }
  void copyFromRoot(const std::vector<comm::BroadcastEntry> &ranks, int root, uint64_t bytes) override {
    group([&] {
      for (const comm::BroadcastEntry &e : ranks)
        nccl_->broadcast(e.rank, ranks[root].buf.data, e.buf.data, bytes, root, streamOf(e.stream));
    });
  }

private:
  /// One NCCL group around `calls`, closed also when a call throws.
  template <typename F> void group(F &&calls) {
    nccl_->groupStart();
    try {
      calls();
    } catch (...) {
      try {
        nccl_->groupEnd();
      } catch (const CudaError &) { // the first failure is the one to report
      }
      throw;
    }
    nccl_->groupEnd();
  }

  std::unique_ptr<NcclComms> nccl_;
};

} // namespace

Expected<std::unique_ptr<comm::Communicator>>
makeLoopbackCommunicator(int gpu, int ranks, const std::vector<uint64_t> &stageBytes) {
  using E = Expected<std::unique_ptr<comm::Communicator>>;
  if (ranks < 1 || ranks > kMaxLoopback)
    return Error{fmt::format("{} logical devices on one GPU; at most {} are supported", ranks, kMaxLoopback)};
  try {
    return E(std::make_unique<LoopbackCommunicator>(gpu, ranks, stageBytes));
  } catch (const CudaError &e) {
    return Error{fmt::format("loopback communicator on GPU {}: {}", gpu, e.what())};
  }
}

Expected<std::unique_ptr<comm::Communicator>> makeNcclCommunicator(const std::vector<int> &gpus,
                                                                   const std::vector<uint64_t> &stageBytes) {
  using E = Expected<std::unique_ptr<comm::Communicator>>;
  auto nccl = NcclComms::create(gpus);
  if (!nccl)
    return Error{nccl.message()};
  try {
    return E(std::make_unique<NcclCommunicator>(nccl.take(), gpus, stageBytes));
  } catch (const CudaError &e) {
    return Error{fmt::format("nccl communicator: {}", e.what())};
  }
}

} // namespace tpc::rt::cuda
