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
// Groups of one session (its in-process CPU devices) can share a HelpBoard: a dynamic job is then posted on
// the board, and a thread of another group that is waiting (at a collective, with nothing of its own to do)
// runs some of its units (`HelpBoard::helpOnce`) under a thread index past the group's own
// (`slots()`), so its scratch is its own. Two one-thread devices on two cores then keep both busy when one
// of them reaches the all-reduce first: decode splits each layer between them, and their shares of a layer
// finish at different times by 10-30 % on a VM (memory streams, interrupts).
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

class ThreadGroup;

/// The posted dynamic jobs of several thread groups (see the file comment). Lives as long as its groups.
class HelpBoard {
public:
  explicit HelpBoard(int groups);
  HelpBoard(const HelpBoard &) = delete;
  HelpBoard &operator=(const HelpBoard &) = delete;
  int groups() const { return n_; }
  /// Runs one unit of another group's posted job for group `self` (its thread index there: that group's
  /// size() + self). Returns false when no group had an unclaimed unit.
  bool helpOnce(int self);

private:
  friend class ThreadGroup;
  struct alignas(64) Post {
    std::atomic<uint64_t> id{0};  ///< the posted job's serial, 0 while none is posted
    std::atomic<int> helpers{0};  ///< threads of other groups inside the job (the owner waits for 0)
    ThreadGroup *group = nullptr; ///< set once by attachBoard
  };
  int n_;
  std::unique_ptr<Post[]> posts_;
};

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

  /// Thread indices a job's function may see: size(), plus one per group of the board (its helpers).
  int slots() const { return static_cast<int>(scratch_.size()); }

  /// Posts this group's dynamic jobs on `board` as group `index` (< board.groups()); call before any job.
  void attachBoard(HelpBoard &board, int index);

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
  friend class HelpBoard;
  void workerLoop(int thread);
  /// Runs chunk `first` if unclaimed, then every other unclaimed chunk of job `gen`.
  void runChunks(int thread, uint64_t gen, const RangeFn *job, int64_t n, int64_t chunk, int chunks);
  /// parallelDynamic through the board: posted, run by this group and any helpers, withdrawn.
  void parallelPosted(int64_t n, const UnitFn &fn);
  /// Runs unit u of the posted job as `thread`, keeping its exception, and counts it done.
  void runPostedUnit(int64_t u, int thread);
  /// Claims and runs the posted job's units until none are left.
  void claimPosted(int thread);

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
  // The posted dynamic job (valid while board_->posts_[boardIndex_].id is nonzero).
  HelpBoard *board_ = nullptr;
  int boardIndex_ = 0;
  uint64_t serial_ = 0;
  const UnitFn *posted_ = nullptr;
  int64_t postedN_ = 0;
  alignas(64) std::atomic<int64_t> postedDone_{0};
  std::exception_ptr postedError_; ///< the first exception of a posted unit (errorMutex_)
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_THREADGROUP_H
