//===- ThreadGroup.cpp - fixed worker threads for CPU kernels --------------===//
//
// Hand-off protocol: the caller publishes the job under a seqlock-style generation (odd while writing),
// then every thread claims chunks with a compare-and-swap of the job's generation into claim_[chunk]
// (its own chunk first, then any unclaimed one) and counts finished chunks in done_; the caller returns
// when done_ reaches the chunk count. A worker that wakes late finds every chunk claimed and goes back to
// waiting, so the caller never waits for a thread that has not started.
// Waiting spins with a pause hint, then yields, and a worker idle for ~2 ms sleeps on a condition
// variable so an idle group costs no CPU (the machine is shared with builds and other groups).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ThreadGroup.h"
#include "runtime/support/SpinWait.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace tpc::rt::cpu {
namespace {

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
  claim_.reset(new std::atomic<uint64_t>[static_cast<size_t>(nThreads)]);
  for (int t = 0; t < nThreads; ++t)
    claim_[t].store(0);
  workers_.reserve(static_cast<size_t>(nThreads - 1));
  for (int t = 1; t < nThreads; ++t)
    workers_.emplace_back([this, t] { workerLoop(t); });
}

ThreadGroup::~ThreadGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(2);
  }
  wake_.notify_all();
  for (std::thread &w : workers_)
    w.join();
}

void ThreadGroup::runChunks(int thread, uint64_t gen, const RangeFn *job, int64_t n, int64_t chunk,
                            int chunks) {
  for (int i = 0; i < chunks; ++i) {
    int c = (thread + i) % chunks; // own chunk first, then the others in turn
    uint64_t seen = claim_[c].load();
    if (seen >= gen || !claim_[c].compare_exchange_strong(seen, gen))
      continue; // taken (by this job, or the job is already over)
    int64_t begin = chunk * c, end = std::min(n, begin + chunk);
    try {
      (*job)(begin, end, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(errorMutex_);
      if (!error_)
        error_ = std::current_exception();
    }
    done_.fetch_add(1);
  }
}

void ThreadGroup::workerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new, fully published generation: spin, then yield, then sleep.
    uint64_t g = 0;
    waitUntil(
        [&] {
          g = generation_.load(std::memory_order_acquire);
          return g != seen && !(g & 1);
        },
        kSpinIterations, kSleepAfter,
        [&] {
          std::unique_lock<std::mutex> lock(mutex_);
          // seq_cst on sleepers_/generation_ on both sides: either the caller sees this sleeper, or this
          // predicate sees the caller's bump (store-buffer pattern).
          sleepers_.fetch_add(1);
          wake_.wait(lock, [&] { return generation_.load() != seen; });
          sleepers_.fetch_sub(1);
        });
    if (stop_.load())
      return;
    const RangeFn *job = job_.load(std::memory_order_relaxed);
    int64_t n = jobN_.load(std::memory_order_relaxed), chunk = jobChunk_.load(std::memory_order_relaxed);
    int chunks = jobChunks_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    seen = g;
    if (generation_.load(std::memory_order_relaxed) != g)
      continue; // a newer job replaced the fields while we read them; it is over for us anyway
    runChunks(thread, g, job, n, chunk, chunks);
  }
}

namespace {
int checkedGroups(int groups) {
  if (groups < 1 || groups > 1024)
    throw std::invalid_argument("help board: group count " + std::to_string(groups) +
                                " is out of range (1..1024)");
  return groups;
}
} // namespace

HelpBoard::HelpBoard(int groups) : n_(checkedGroups(groups)), posts_(new Post[static_cast<size_t>(n_)]) {}

bool HelpBoard::helpOnce(int self) {
  for (int i = 1; i < n_; ++i) {
    Post &p = posts_[static_cast<size_t>((self + i) % n_)];
    const uint64_t id = p.id.load(std::memory_order_acquire);
    if (id == 0)
      continue;
    // Enter, then check the job is still the one seen: the owner withdraws (id = 0) and then waits for
    // helpers to reach 0, so either it sees this helper or this helper sees the withdrawal (both seq_cst).
    p.helpers.fetch_add(1);
    bool ran = false;
    if (p.id.load() == id) {
      ThreadGroup &g = *p.group;
      const int64_t u = g.nextUnit_.fetch_add(1, std::memory_order_relaxed);
      if (u < g.postedN_) {
        g.runPostedUnit(u, g.nThreads_ + self);
        ran = true;
      }
    }
    p.helpers.fetch_sub(1, std::memory_order_release);
    if (ran)
      return true;
  }
  return false;
}

void ThreadGroup::attachBoard(HelpBoard &board, int index) {
  if (index < 0 || index >= board.groups())
    throw std::invalid_argument("thread group: board index " + std::to_string(index) + " is out of range");
  board_ = &board;
  boardIndex_ = index;
  board.posts_[static_cast<size_t>(index)].group = this;
  scratch_.resize(static_cast<size_t>(nThreads_ + board.groups()));
}

void ThreadGroup::runPostedUnit(int64_t u, int thread) {
  try {
    (*posted_)(u, thread);
  } catch (...) {
    std::lock_guard<std::mutex> lock(errorMutex_);
    if (!postedError_)
      postedError_ = std::current_exception();
  }
  postedDone_.fetch_add(1, std::memory_order_release);
}

void ThreadGroup::claimPosted(int thread) {
  for (int64_t u = nextUnit_.fetch_add(1, std::memory_order_relaxed); u < postedN_;
       u = nextUnit_.fetch_add(1, std::memory_order_relaxed))
    runPostedUnit(u, thread);
}

void ThreadGroup::parallelPosted(int64_t n, const UnitFn &fn) {
  HelpBoard::Post &post = board_->posts_[static_cast<size_t>(boardIndex_)];
  postedError_ = nullptr;
  posted_ = &fn;
  postedN_ = n;
  postedDone_.store(0, std::memory_order_relaxed);
  nextUnit_.store(0, std::memory_order_relaxed);
  post.id.store(++serial_); // seq_cst: publishes the fields above
  if (nThreads_ > 1)
    parallelFor(std::min<int64_t>(nThreads_, n), [&](int64_t, int64_t, int thread) { claimPosted(thread); });
  else
    claimPosted(0);
  // Every unit is claimed; helpers may still be running theirs (into this job's outputs).
  while (postedDone_.load(std::memory_order_acquire) != n)
    cpuRelax();
  post.id.store(0);
  while (post.helpers.load() != 0)
    cpuRelax();
  if (postedError_) {
    std::exception_ptr e = postedError_;
    postedError_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadGroup::parallelFor(int64_t n, const RangeFn &fn) { parallelFor(n, 1, fn); }

void ThreadGroup::parallelDynamic(int64_t n, const UnitFn &fn) {
  if (n <= 0)
    return;
  if (board_ && board_->groups() > 1 && n > 1)
    return parallelPosted(n, fn);
  if (nThreads_ == 1 || n == 1) {
    for (int64_t u = 0; u < n; ++u)
      fn(u, 0);
    return;
  }
  // One claiming loop per thread, handed out as parallelFor chunks: a thread that starts late finds the
  // counter exhausted (or its chunk run by another thread, whose loop found no units either) and returns.
  nextUnit_.store(0, std::memory_order_relaxed);
  parallelFor(std::min<int64_t>(nThreads_, n), [&](int64_t, int64_t, int thread) {
    for (int64_t u = nextUnit_.fetch_add(1, std::memory_order_relaxed); u < n;
         u = nextUnit_.fetch_add(1, std::memory_order_relaxed))
      fn(u, thread);
  });
}

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
  int64_t chunk = perThread * grain;
  int chunks = static_cast<int>((n + chunk - 1) / chunk);
  error_ = nullptr;
  done_.store(0);
  // Seqlock publication: odd while writing, even when the fields are valid.
  generation_.fetch_add(1);
  std::atomic_thread_fence(std::memory_order_release);
  job_.store(&fn, std::memory_order_relaxed);
  jobN_.store(n, std::memory_order_relaxed);
  jobChunk_.store(chunk, std::memory_order_relaxed);
  jobChunks_.store(chunks, std::memory_order_relaxed);
  uint64_t gen = generation_.fetch_add(1) + 1;
  if (sleepers_.load() > 0) {
    // Taking the lock orders the bump before a sleeper's predicate check, so no wake-up is lost.
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  runChunks(0, gen, &fn, n, chunk, chunks);
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != chunks) {
    if (++spins < kSpinIterations)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

} // namespace tpc::rt::cpu
