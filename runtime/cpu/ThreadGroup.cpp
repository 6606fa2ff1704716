//===- ThreadGroup.cpp - fixed worker threads for CPU kernels --------------===//
//
// Hand-off protocol: the caller stores the job, sets pending = nThreads - 1 and bumps the generation;
// each worker runs its chunk and decrements pending; the caller runs chunk 0 and waits for pending == 0.
// Waiting spins with a pause hint, then yields, and a worker idle for ~2 ms sleeps on a condition
// variable so an idle group costs no CPU (the machine is shared with builds and other groups).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ThreadGroup.h"

#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpc::rt::cpu {
namespace {

inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

constexpr int kSpinIterations = 20000;
constexpr auto kSleepAfter = std::chrono::milliseconds(2);

} // namespace

void ScratchBuffer::Free::operator()(void *p) const { std::free(p); }

void *ScratchBuffer::get(size_t bytes) {
  if (bytes <= cap_ && data_)
    return data_.get();
  size_t want = std::max<size_t>(bytes, cap_ + cap_ / 2);
  want = (want + 63) & ~size_t(63);
  if (want < bytes)
    throw std::bad_alloc();
  void *p = std::aligned_alloc(64, want == 0 ? 64 : want);
  if (!p)
    throw std::bad_alloc();
  data_.reset(p);
  cap_ = want;
  return p;
}

ThreadGroup::ThreadGroup(int nThreads) : nThreads_(nThreads) {
  if (nThreads < 1 || nThreads > 1024)
    throw std::invalid_argument("thread group: thread count " + std::to_string(nThreads) +
                                " is out of range (1..1024)");
  scratch_.resize(static_cast<size_t>(nThreads));
  workers_.reserve(static_cast<size_t>(nThreads - 1));
  for (int t = 1; t < nThreads; ++t)
    workers_.emplace_back([this, t] { workerLoop(t); });
}

ThreadGroup::~ThreadGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (std::thread &w : workers_)
    w.join();
}

void ThreadGroup::runChunk(int thread) {
  int64_t begin = jobChunk_ * thread;
  int64_t end = std::min(jobN_, begin + jobChunk_);
  if (begin >= end)
    return;
  try {
    (*job_)(begin, end, thread);
  } catch (...) {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (!error_)
      error_ = std::current_exception();
  }
}

void ThreadGroup::workerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin, then yield, then sleep.
    uint64_t g = generation_.load(std::memory_order_acquire);
    auto start = std::chrono::steady_clock::now();
    int spins = 0;
    while (g == seen) {
      if (spins < kSpinIterations) {
        ++spins;
        cpuRelax();
      } else if (std::chrono::steady_clock::now() - start < kSleepAfter) {
        std::this_thread::yield();
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        // seq_cst on sleepers_/generation_ on both sides: either the caller sees this sleeper, or this
        // predicate sees the caller's bump (store-buffer pattern).
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire))
      return;
    runChunk(thread);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadGroup::parallelFor(int64_t n, const RangeFn &fn) { parallelFor(n, 1, fn); }

void ThreadGroup::parallelFor(int64_t n, int64_t grain, const RangeFn &fn) {
  if (n <= 0)
    return;
  if (grain < 1)
    grain = 1;
  int64_t units = (n + grain - 1) / grain;
  int64_t perThread = (units + nThreads_ - 1) / nThreads_;
  if (nThreads_ == 1 || units == 1) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  jobN_ = n;
  jobChunk_ = perThread * grain;
  error_ = nullptr;
  pending_.store(nThreads_ - 1, std::memory_order_release);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    // Taking the lock orders the bump before a sleeper's predicate check, so no wake-up is lost.
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  runChunk(0);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinIterations)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  job_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

} // namespace tpc::rt::cpu
