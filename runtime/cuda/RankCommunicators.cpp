//===- RankCommunicators.cpp - NCCL per rank, and MPI on host-staged buffers -===//
//
// RankCommunicator holds what both share: the one-rank argument check, the abort latch, CUDA failures
// turned into the call's error (which aborts: the buffers then hold garbage). NcclRankCommunicator and
// HostStagedCommunicator implement the collectives.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/RankCommunicators.h"

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/DeviceMemory.h"

#include <fmt/core.h>

#include <mutex>

namespace tpc::rt::cuda {

namespace {

using comm::AxisParts;
using comm::ElemType;

cudaStream_t streamOf(void *s) { return static_cast<cudaStream_t>(s); }

/// The shared part (see the file comment).
class RankCommunicator : public comm::Communicator {
public:
  RankCommunicator(int rank, int size, int gpu) : rank_(rank), size_(size), gpu_(gpu) {}
  int size() const override { return size_; }
  std::vector<int> localRanks() const override { return {rank_}; }
  bool streamOrdered() const override { return true; }
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
  /// reserveRankStaging and rankCommunicatorCapturable (RankCommunicators.h).
  virtual void reserveStaging(uint64_t deviceBytes, uint64_t hostBytes) = 0;
  virtual bool capturable() const = 0;

protected:
  /// "" when `local` is exactly this rank and the communicator was not aborted; else the error.
  template <typename E> std::string check(const char *what, const std::vector<E> &local) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return fmt::format("{} communicator aborted: {}", name(), reason_);
    }
    if (local.size() != 1 || local[0].rank != rank_)
      return failText(fmt::format("{}: a call carries exactly this process's rank {}; got {} entries{}", what,
                                  rank_, local.size(),
                                  local.empty() ? "" : fmt::format(" (first rank {})", local[0].rank)));
    return "";
  }
  /// Aborts with `why` and returns the call's error text.
  std::string failText(const std::string &why) {
    abort(why);
    return fmt::format("{} communicator: {}", name(), why);
  }
  /// Runs `body` on this rank's GPU; a CudaError becomes the error of the call `what`.
  template <typename F> Expected<void> guarded(const char *what, F &&body) {
    try {
      TPC_CUDA_CHECK(cudaSetDevice(gpu_));
      body();
    } catch (const CudaError &e) {
      return Error{failText(fmt::format("{}: {}", what, e.what()))};
    }
    return {};
  }
  /// Grows `buf` on this rank's GPU to at least `bytes` (keeps it when large enough).
  void reserve(GpuAlloc &buf, uint64_t bytes) {
    if (buf.p && buf.size >= bytes)
      return;
    if (buf.p) { // GpuAlloc cannot be reassigned: free in place
      TPC_CUDA_CHECK(cudaFree(buf.p));
      buf.p = nullptr;
    }
    TPC_CUDA_CHECK(buf.allocate(gpu_, bytes));
  }

  const int rank_, size_, gpu_;

private:
  mutable std::mutex mu_;
  bool aborted_ = false;
  std::string reason_;
};

/// NCCL, one rank per process on distinct GPUs.
class NcclRankCommunicator final : public RankCommunicator {
public:
  NcclRankCommunicator(std::unique_ptr<NcclComms> nccl, int rank, int size, int gpu)
      : RankCommunicator(rank, size, gpu), nccl_(std::move(nccl)) {}
  ~NcclRankCommunicator() override {
    if (own_) {
      cudaSetDevice(gpu_);
      cudaStreamDestroy(own_);
    }
  }
  const char *name() const override { return "nccl"; }
  void reserveStaging(uint64_t deviceBytes, uint64_t) override {
    TPC_CUDA_CHECK(cudaSetDevice(gpu_));
    reserve(stage_, deviceBytes);
  }
  bool capturable() const override { return true; }

  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;

  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &local, ElemType type) override {
    if (std::string e = check("all-reduce", local); !e.empty())
      return Error{e};
    if (type != ElemType::F32)
      return Error{failText(fmt::format("all-reduce: sums of {} are not supported (f32 only)", elemTypeName(type)))};
    return guarded("all-reduce", [&] {
      nccl_->groupStart(); // the bucket is one collective
      for (const comm::Buffer &b : local[0].bucket)
        if (b.count)
          nccl_->allReduce(rank_, static_cast<const float *>(b.data), static_cast<float *>(b.data), b.count,
                           streamOf(local[0].stream));
      nccl_->groupEnd();
    });
  }

  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &local, const AxisParts &layout,
                           ElemType type) override {
    if (std::string e = checkParts("all-gather", local, layout, type); !e.empty())
      return Error{e};
    const comm::AllGatherEntry &e = local[0];
    const int64_t total = layout.total(), inner = layout.inner;
    const cudaStream_t st = streamOf(e.stream);
    return guarded("all-gather", [&] {
      // The part may lie inside the whole: stage it before zeroing the whole, then sum the wholes.
      const uint64_t partBytes = uint64_t(e.part.count) * 4, width = uint64_t(layout.parts[rank_] * inner) * 4;
      reserve(stage_, partBytes);
      if (partBytes)
        TPC_CUDA_CHECK(cudaMemcpyAsync(stage_.p, e.part.data, partBytes, cudaMemcpyDeviceToDevice, st));
      if (e.whole.count)
        TPC_CUDA_CHECK(cudaMemsetAsync(e.whole.data, 0, uint64_t(e.whole.count) * 4, st));
      if (width && layout.outer)
        TPC_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<float *>(e.whole.data) + layout.offset(rank_) * inner,
                                         total * inner * 4, stage_.p, width, width, layout.outer,
                                         cudaMemcpyDeviceToDevice, st));
      float *whole = static_cast<float *>(e.whole.data);
      nccl_->allReduce(rank_, whole, whole, layout.outer * total * inner, st);
    });
  }

  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &local, const AxisParts &layout,
                               ElemType type) override {
    if (std::string e = checkParts("reduce-scatter", local, layout, type); !e.empty())
      return Error{e};
    const comm::ReduceScatterEntry &e = local[0];
    const int64_t total = layout.total(), inner = layout.inner;
    const cudaStream_t st = streamOf(e.stream);
    return guarded("reduce-scatter", [&] {
      reserve(stage_, uint64_t(e.whole.count) * 4);
      float *sum = reinterpret_cast<float *>(stage_.p);
      nccl_->allReduce(rank_, static_cast<const float *>(e.whole.data), sum, e.whole.count, st);
      const uint64_t width = uint64_t(layout.parts[rank_] * inner) * 4;
      if (width && layout.outer)
        TPC_CUDA_CHECK(cudaMemcpy2DAsync(e.part.data, width, sum + layout.offset(rank_) * inner,
                                         total * inner * 4, width, layout.outer, cudaMemcpyDeviceToDevice, st));
    });
  }

  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &local, int root, ElemType type) override {
    if (std::string e = check("broadcast", local); !e.empty())
      return Error{e};
    if (root < 0 || root >= size_)
      return Error{failText(fmt::format("broadcast: root {} is outside 0..{}", root, size_ - 1))};
    const comm::BroadcastEntry &e = local[0];
    return guarded("broadcast", [&] {
      if (e.buf.count)
        nccl_->broadcast(rank_, e.buf.data, e.buf.data, uint64_t(e.buf.count) * comm::elemBytes(type), root,
                         streamOf(e.stream));
    });
  }

  Expected<void> barrier(const std::vector<int> &ranks) override {
    std::vector<comm::BroadcastEntry> es;
    for (int r : ranks)
      es.push_back({r, {}, nullptr});
    if (std::string e = check("barrier", es); !e.empty())
      return Error{e};
    // A one-float sum on a stream of its own, waited for: every rank has then arrived.
    return guarded("barrier", [&] {
      if (!own_)
        TPC_CUDA_CHECK(cudaStreamCreateWithFlags(&own_, cudaStreamNonBlocking));
      reserve(token_, 4);
      float *t = reinterpret_cast<float *>(token_.p);
      nccl_->allReduce(rank_, t, t, 1, own_);
      TPC_CUDA_CHECK(cudaStreamSynchronize(own_));
    });
  }

private:
  /// check(), then f32 (both are built on the sum) and a layout with one part per rank.
  template <typename E>
  std::string checkParts(const char *what, const std::vector<E> &local, const AxisParts &layout, ElemType type) {
    if (std::string e = check(what, local); !e.empty())
      return e;
    if (type != ElemType::F32)
      return failText(fmt::format("{}: {} is not supported (f32 only: it is built on the sum)", what,
                                  elemTypeName(type)));
    if (int(layout.parts.size()) != size_)
      return failText(fmt::format("{}: the layout has {} parts for {} ranks", what, layout.parts.size(), size_));
    return "";
  }

  std::unique_ptr<NcclComms> nccl_;
  GpuAlloc stage_, token_;
  cudaStream_t own_ = nullptr;
};

/// The host communicator's collectives on pinned copies of the device buffers.
class HostStagedCommunicator final : public RankCommunicator {
public:
  HostStagedCommunicator(std::shared_ptr<comm::Communicator> host, int gpu)
      : RankCommunicator(host->localRanks().at(0), host->size(), gpu), host_(std::move(host)) {}
  ~HostStagedCommunicator() override {
    if (pinned_)
      cudaFreeHost(pinned_);
  }
  const char *name() const override { return "mpi, host-staged"; }
  /// The host communicator sums, so its payloads are this one's (MPI: f32 and bf16).
  bool supportsPayload(comm::Payload p) const override { return host_->supportsPayload(p); }
  void reserveStaging(uint64_t, uint64_t hostBytes) override {
    TPC_CUDA_CHECK(cudaSetDevice(gpu_));
    reservePinned(hostBytes);
  }
  bool capturable() const override { return false; }

  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;

  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &local, ElemType type) override {
    if (std::string e = check("all-reduce", local); !e.empty())
      return Error{e};
    const comm::AllReduceEntry &e = local[0];
    uint64_t bytes = 0;
    for (const comm::Buffer &b : e.bucket)
      bytes += uint64_t(b.count) * comm::elemBytes(type);
    return staged("all-reduce", e.stream, bytes, [&](char *h) {
      std::vector<comm::Buffer> hb;
      for (const comm::Buffer &b : e.bucket) {
        const uint64_t n = uint64_t(b.count) * comm::elemBytes(type);
        down(h, b.data, n, e.stream);
        hb.push_back({h, b.count});
        h += n;
      }
      sync(e.stream);
      host_->setPayload(payload_);
      Expected<void> ok = host_->allReduce({comm::AllReduceEntry{rank_, hb, nullptr}}, type);
      for (size_t i = 0; ok && i < hb.size(); ++i)
        up(e.bucket[i].data, hb[i].data, uint64_t(hb[i].count) * comm::elemBytes(type), e.stream);
      return ok;
    });
  }

  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &local, const AxisParts &layout,
                           ElemType type) override {
    if (std::string e = check("all-gather", local); !e.empty())
      return Error{e};
    const comm::AllGatherEntry &e = local[0];
    const uint64_t eb = comm::elemBytes(type), part = uint64_t(e.part.count) * eb,
                   whole = uint64_t(e.whole.count) * eb;
    return inOut("all-gather", e.stream, e.part.data, part, e.whole.data, whole, [&](char *in, char *out) {
      return host_->allGather({comm::AllGatherEntry{rank_, {in, e.part.count}, {out, e.whole.count}, nullptr}},
                              layout, type);
    });
  }

  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &local, const AxisParts &layout,
                               ElemType type) override {
    if (std::string e = check("reduce-scatter", local); !e.empty())
      return Error{e};
    const comm::ReduceScatterEntry &e = local[0];
    const uint64_t eb = comm::elemBytes(type), whole = uint64_t(e.whole.count) * eb,
                   part = uint64_t(e.part.count) * eb;
    return inOut("reduce-scatter", e.stream, e.whole.data, whole, e.part.data, part, [&](char *in, char *out) {
      return host_->reduceScatter(
          {comm::ReduceScatterEntry{rank_, {in, e.whole.count}, {out, e.part.count}, nullptr}}, layout, type);
    });
  }

  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &local, int root, ElemType type) override {
    if (std::string e = check("broadcast", local); !e.empty())
      return Error{e};
    const comm::BroadcastEntry &e = local[0];
    const uint64_t bytes = uint64_t(e.buf.count) * comm::elemBytes(type);
    return staged("broadcast", e.stream, bytes, [&](char *h) {
      if (rank_ == root)
        down(h, e.buf.data, bytes, e.stream);
      sync(e.stream);
      Expected<void> ok = host_->broadcast({comm::BroadcastEntry{rank_, {h, e.buf.count}, nullptr}}, root, type);
      if (ok && rank_ != root)
        up(e.buf.data, h, bytes, e.stream);
      return ok;
    });
  }

  Expected<void> barrier(const std::vector<int> &ranks) override { return host_->barrier(ranks); }
  void abort(const std::string &reason) override {
    RankCommunicator::abort(reason);
    host_->abort(reason);
  }

private:
  void down(void *h, const void *d, uint64_t n, void *st) {
    if (n)
      TPC_CUDA_CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, streamOf(st)));
  }
  void up(void *d, const void *h, uint64_t n, void *st) {
    if (n)
      TPC_CUDA_CHECK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, streamOf(st)));
  }
  void sync(void *st) { TPC_CUDA_CHECK(cudaStreamSynchronize(streamOf(st))); }
  /// Grows the pinned buffer to at least `bytes`.
  void reservePinned(uint64_t bytes) {
    if (bytes <= pinnedBytes_)
      return;
    if (pinned_)
      TPC_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr, pinnedBytes_ = 0;
    TPC_CUDA_CHECK(cudaMallocHost(&pinned_, bytes));
    pinnedBytes_ = bytes;
  }

  /// Runs `body` on a pinned buffer of `bytes`, then waits until its copies back to the GPU are done (the
  /// buffer is reused by the next call). The host collective's error aborts this communicator too.
  template <typename F> Expected<void> staged(const char *what, void *stream, uint64_t bytes, F &&body) {
    Expected<void> result;
    Expected<void> cuda = guarded(what, [&] {
      reservePinned(bytes);
      result = body(static_cast<char *>(pinned_));
      sync(stream);
    });
    if (!cuda)
      return cuda;
    if (!result)
      return Error{failText(fmt::format("{}: {}", what, result.message()))};
    return {};
  }

  /// A gather / scatter: `in` (device, inBytes) goes down, `call(hostIn, hostOut)` runs the host
  /// collective, and the host result comes back up into `out` (device, outBytes).
  template <typename F>
  Expected<void> inOut(const char *what, void *stream, const void *in, uint64_t inBytes, void *out,
                       uint64_t outBytes, F call) {
    return staged(what, stream, inBytes + outBytes, [&](char *h) {
      down(h, in, inBytes, stream);
      sync(stream);
      Expected<void> ok = call(h, h + inBytes);
      if (ok)
        up(out, h + inBytes, outBytes, stream);
      return ok;
    });
  }

  std::shared_ptr<comm::Communicator> host_;
  void *pinned_ = nullptr;
  uint64_t pinnedBytes_ = 0;
};

} // namespace

Expected<std::shared_ptr<comm::Communicator>> makeNcclRankCommunicator(const NcclId &id, int rank, int size,
                                                                     int gpu) {
  auto nccl = NcclComms::joinRank(id, rank, size, gpu);
  if (!nccl)
    return Error{nccl.message()};
  return std::shared_ptr<comm::Communicator>(std::make_shared<NcclRankCommunicator>(nccl.take(), rank, size, gpu));
}

Expected<void> reserveRankStaging(comm::Communicator &c, uint64_t deviceBytes, uint64_t hostBytes) {
  auto *r = dynamic_cast<RankCommunicator *>(&c);
  if (!r)
    return {};
  try {
    r->reserveStaging(deviceBytes, hostBytes);
  } catch (const CudaError &e) {
    return Error{fmt::format("{} communicator: staging memory ({} bytes on the GPU, {} pinned): {}", c.name(),
                             deviceBytes, hostBytes, e.what())};
  }
  return {};
}

bool rankCommunicatorCapturable(const comm::Communicator &c) {
  const auto *r = dynamic_cast<const RankCommunicator *>(&c);
  return r && r->capturable();
}

Expected<std::string> gpuBusId(int gpu) {
  char id[32] = {};
  if (cudaError_t e = cudaDeviceGetPCIBusId(id, sizeof id, gpu); e != cudaSuccess)
    return Error{fmt::format("GPU {}: cudaDeviceGetPCIBusId: {}", gpu, cudaGetErrorString(e))};
  return std::string(id);
}

Expected<std::shared_ptr<comm::Communicator>> makeHostStagedCommunicator(std::shared_ptr<comm::Communicator> host,
                                                                       int gpu) {
  if (!host || host->streamOrdered() || host->localRanks().size() != 1)
    return Error{"the host-staged communicator needs a blocking host communicator with one local rank (MPI)"};
  return std::shared_ptr<comm::Communicator>(std::make_shared<HostStagedCommunicator>(std::move(host), gpu));
}

} // namespace tpc::rt::cuda
