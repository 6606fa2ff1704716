//===- Collectives.cpp - shared-memory all-reduce, all-gather, reduce-scatter ===//
//
// All-reduce: device r owns elements [n·r/N, n·(r+1)/N) of each tensor; it sums them over all devices (in
// rank order) into its scratch, and after a barrier writes the sums back into every device's buffer.
// All-gather and reduce-scatter read the peers' buffers between two barriers.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Collectives.h"

namespace tpc::rt::exec {

namespace {
/// Spin iterations before a device waiting at a barrier sleeps (~20 us: PAUSE takes ~70 ns on the VMs).
constexpr int kBarrierSpin = 300;
} // namespace

Rendezvous::Rendezvous(int n) : n_(n), bufs_(n), x_(n), y_(n), scratch_(n) {}

void Rendezvous::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void Rendezvous::barrier() {
  if (aborted_.load())
    return;
  const uint64_t gen = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
    arrived_.store(0, std::memory_order_relaxed); // nobody re-enters before the bump below
    {
      std::lock_guard<std::mutex> lock(mu_); // orders the bump against a sleeper's predicate check
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    return;
  }
  for (int spins = 0; spins < kBarrierSpin; ++spins) {
    if (generation_.load(std::memory_order_acquire) != gen || aborted_.load(std::memory_order_relaxed))
      return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return aborted_.load() || generation_.load() != gen; });
}

void Rendezvous::allReduce(int rank, const std::vector<TensorRef> &bufs) {
  if (n_ == 1)
    return;
  bufs_[rank] = &bufs;
  barrier();
  if (aborted_)
    return;
  std::vector<float> &scratch = scratch_[rank];
  size_t need = 0;
  for (const TensorRef &b : bufs)
    need += static_cast<size_t>(b.numel() / n_ + 1);
  scratch.resize(need);
  size_t at = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    const int64_t n = bufs[i].numel(), b = n * rank / n_, e = n * (rank + 1) / n_;
    float *acc = scratch.data() + at;
    std::memcpy(acc, (*bufs_[0])[i].f() + b, (e - b) * 4);
    for (int d = 1; d < n_; ++d) {
      const float *src = (*bufs_[d])[i].f() + b;
      for (int64_t j = 0; j < e - b; ++j)
        acc[j] += src[j];
    }
    at += static_cast<size_t>(e - b);
  }
  barrier(); // every share summed before anyone overwrites an addend
  if (aborted_)
    return;
  at = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    const int64_t n = bufs[i].numel(), b = n * rank / n_, e = n * (rank + 1) / n_;
    for (int d = 0; d < n_; ++d)
      std::memcpy((*bufs_[d])[i].f() + b, scratch.data() + at, (e - b) * 4);
    at += static_cast<size_t>(e - b);
  }
  barrier();
}

void Rendezvous::allGather(int rank, const TensorRef &x, const TensorRef &y, int64_t axis) {
  x_[rank] = &x;
  barrier();
  if (aborted_)
    return;
  std::vector<TensorRef> parts;
  for (int d = 0; d < n_; ++d)
    parts.push_back(*x_[d]);
  opConcat(parts, y, axis);
  barrier();
}

void Rendezvous::reduceScatter(int rank, const TensorRef &x, const TensorRef &y, int64_t axis) {
  x_[rank] = &x;
  y_[rank] = &y;
  barrier();
  if (aborted_)
    return;
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d)
    offset += y_[d]->shape[axis];
  int64_t outer, dim, inner;
  splitAxis(x.shape, axis, outer, dim, inner);
  const int64_t size = y.shape[axis];
  for (int64_t o = 0; o < outer; ++o) {
    float *dst = y.f() + o * size * inner;
    const int64_t src = (o * dim + offset) * inner;
    std::memcpy(dst, x_[0]->f() + src, size * inner * 4);
    for (int d = 1; d < n_; ++d) {
      const float *p = x_[d]->f() + src;
      for (int64_t j = 0; j < size * inner; ++j)
        dst[j] += p[j];
    }
  }
  barrier();
}

} // namespace tpc::rt::exec
