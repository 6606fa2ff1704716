//===- ThreadGroup.h - fixed worker threads for CPU kernels ------*- C++ -*-===//
//
// A fixed group of threads that runs data-parallel jobs: the CPU executor runs N logical devices as N
// thread groups of `-t / N` threads each. Threads are created once; a job is handed over through an atomic
// generation counter that idle workers spin on (then yield, then sleep after a while), because decode
// issues thousands of small jobs per token and a condition-variable wake-up per job costs more than the job.
//
// Chunks are static (chunk t is meant for thread t, so the split is deterministic), but a thread that has
// finished its chunk takes the chunks nobody has started. On a busy machine a descheduled worker then
// delays nothing: the caller runs its chunk instead of waiting a whole time slice for it.
//
// parallelDynamic serves jobs of uneven units (experts with different token counts, panels of different
// cost): every thread claims the next unit from an atomic counter until none are left, so no thread idles
// while another still has a backlog.
//
// The calling thread takes part as thread 0. Jobs must not call parallelFor on the same group (no nesting).
// An exception thrown by a job is rethrown in the caller after every thread has finished.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_THREADGROUP_H
#define TPC_RUNTIME_CPU_THREADGROUP_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tpc::rt::cpu {

/// A 64-byte aligned growable byte buffer (scratch memory that survives between jobs).
class ScratchBuffer {
public:
  /// At least `bytes` bytes, 64-byte aligned; the old contents are lost when it grows.
  void *get(size_t bytes);
  /// Current capacity in bytes.
  size_t capacity() const { return cap_; }

private:
  struct Free {
    void operator()(void *p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t cap_ = 0;
};

/// The job signature: a half-open range [begin, end) and the index of the thread running it.
using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;
/// A dynamic job's signature: one unit and the index of the thread running it.
using UnitFn = std::function<void(int64_t unit, int thread)>;

/// A fixed group of worker threads (see the file comment).
class ThreadGroup {
public:
  /// Starts nThreads - 1 workers (nThreads >= 1; the caller is thread 0).
  explicit ThreadGroup(int nThreads);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup &) = delete;
  ThreadGroup &operator=(const ThreadGroup &) = delete;

  /// Number of threads, the caller included.
  int size() const { return nThreads_; }

  /// Runs fn over [0, n) split into size() contiguous chunks (static chunking; chunk t goes to thread t,
  /// empty chunks are skipped). Returns when all chunks are done.
  void parallelFor(int64_t n, const RangeFn &fn);

  /// Like parallelFor but with chunks that are multiples of `grain` (the last one may be shorter).
  void parallelFor(int64_t n, int64_t grain, const RangeFn &fn);

  /// Runs fn(u, thread) for every u in [0, n), units claimed one at a time in increasing order from a shared
  /// counter by whichever thread is free (dynamic scheduling). Returns when all are done. Which thread runs
  /// a unit varies from call to call, so a unit's result must not depend on it (only its scratch does).
  void parallelDynamic(int64_t n, const UnitFn &fn);

  /// Scratch private to `thread`, valid until the next call with the same thread and a larger size.
  void *threadScratch(int thread, size_t bytes) { return scratch_[static_cast<size_t>(thread)].get(bytes); }

  /// Scratch shared by all threads (e.g. quantized activations). Call only outside a job.
  void *sharedScratch(size_t bytes) { return shared_.get(bytes); }

private:
  void workerLoop(int thread);
  /// Runs chunk `first` if unclaimed, then every other unclaimed chunk of job `gen`.
  void runChunks(int thread, uint64_t gen, const RangeFn *job, int64_t n, int64_t chunk, int chunks);

  int nThreads_;
  std::vector<std::thread> workers_;
  std::vector<ScratchBuffer> scratch_;
  ScratchBuffer shared_;

  // The current job, published seqlock style: generation_ is odd while the caller writes these fields and
  // even once they are valid; a worker re-checks the generation after reading them.
  std::atomic<const RangeFn *> job_{nullptr};
  std::atomic<int64_t> jobN_{0}, jobChunk_{0};
  std::atomic<int> jobChunks_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  /// claim_[c] holds the generation of the job whose chunk c has been taken.
  std::unique_ptr<std::atomic<uint64_t>[]> claim_;
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<int64_t> nextUnit_{0}; ///< parallelDynamic's claim counter
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_THREADGROUP_H
