//===- ThreadGroupTest.cpp - worker hand-off, chunking, errors, scratch ----===//
#include "runtime/cpu/ThreadGroup.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace tpc::rt::cpu;

TEST(ThreadGroup, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadGroup g(threads);
    EXPECT_EQ(g.size(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> maxThread{-1};
      g.parallelFor(n, [&](int64_t b, int64_t e, int t) {
        ASSERT_LT(b, e);
        for (int64_t i = b; i < e; ++i)
          hits[static_cast<size_t>(i)]++;
        int cur = maxThread.load();
        while (t > cur && !maxThread.compare_exchange_weak(cur, t)) {
        }
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads " << threads << " n " << n;
      EXPECT_LT(maxThread.load(), threads);
    }
  }
}

TEST(ThreadGroup, ManySmallJobsInARow) {
  // Decode issues thousands of tiny jobs per token; every one must see all of its work done on return.
  ThreadGroup g(2);
  int64_t total = 0;
  std::vector<int64_t> slots(3);
  for (int rep = 0; rep < 5000; ++rep) {
    g.parallelFor(3, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        slots[static_cast<size_t>(i)] = rep + i;
    });
    total += slots[0] + slots[1] + slots[2] - 3 * rep - 3;
  }
  EXPECT_EQ(total, 0);
}

TEST(ThreadGroup, GrainKeepsChunksAligned) {
  ThreadGroup g(3);
  std::atomic<int> bad{0};
  g.parallelFor(100, 8, [&](int64_t b, int64_t e, int) {
    if (b % 8 != 0 || (e != 100 && e % 8 != 0))
      bad++;
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadGroup, ExceptionIsRethrownAndGroupStaysUsable) {
  ThreadGroup g(2);
  EXPECT_THROW(g.parallelFor(10,
                             [](int64_t b, int64_t, int) {
                               if (b > 0)
                                 throw std::runtime_error("worker failed");
                             }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  g.parallelFor(10, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i)
      sum += i;
  });
  EXPECT_EQ(sum.load(), 45);
}

TEST(ThreadGroup, ScratchIsAlignedAndPerThread) {
  ThreadGroup g(2);
  void *a = g.threadScratch(0, 100), *b = g.threadScratch(1, 100);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(g.threadScratch(0, 50), a); // no reallocation when it fits
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.sharedScratch(1 << 20)) % 64, 0u);
  EXPECT_THROW(ThreadGroup(0), std::invalid_argument);
}

TEST(ThreadGroup, SleepingWorkerWakesAndTakesItsChunk) {
  ThreadGroup g(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the worker falls asleep
  // Chunk 0 (the caller's) waits for chunk 1, so chunk 1 must run on the woken worker.
  std::atomic<bool> secondDone{false};
  std::atomic<int> secondThread{-1};
  bool sawSecond = false;
  g.parallelFor(2, [&](int64_t b, int64_t, int t) {
    if (b == 1) {
      secondThread = t;
      secondDone = true;
      return;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!secondDone && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    sawSecond = secondDone;
  });
  EXPECT_TRUE(sawSecond) << "the worker never ran chunk 1";
  EXPECT_EQ(secondThread.load(), 1);
}

TEST(ThreadGroup, SlowChunkOnWorkerStillCompletesTheJob) {
  // Whichever thread ends up with chunk 1 (the worker, or the caller taking it over), the job completes
  // with every chunk run once.
  ThreadGroup g(2);
  std::atomic<bool> release{false};
  std::thread blocker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  std::atomic<int> ran{0};
  g.parallelFor(2, [&](int64_t b, int64_t, int t) {
    if (t == 1)
      while (!release)
        std::this_thread::yield();
    ran += static_cast<int>(b) + 1;
  });
  blocker.join();
  EXPECT_EQ(ran.load(), 3);
}

TEST(ThreadGroup, DynamicUnitsRunOnceAndBalanceUnevenWork) {
  for (int threads : {1, 2, 3}) {
    ThreadGroup g(threads);
    for (int64_t n : {0, 1, 2, 5, 300}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      g.parallelDynamic(n, [&](int64_t u, int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, threads);
        hits[static_cast<size_t>(u)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads " << threads << " n " << n;
    }
  }
  // One long unit first, then many short ones: with static chunks the thread holding the long unit would
  // also own half of the short ones; with claiming, the other thread takes (nearly) all of them.
  ThreadGroup g(2);
  std::vector<int> owner(201, -1);
  g.parallelDynamic(201, [&](int64_t u, int t) {
    owner[static_cast<size_t>(u)] = t;
    if (u == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  int longOwnerShort = 0;
  for (size_t u = 1; u < owner.size(); ++u)
    longOwnerShort += owner[u] == owner[0];
  EXPECT_LT(longOwnerShort, 50) << "the thread busy with the long unit also ran most short units";
}

TEST(ThreadGroup, DynamicJobErrorsReachTheCaller) {
  ThreadGroup g(2);
  EXPECT_THROW(g.parallelDynamic(10,
                                 [](int64_t u, int) {
                                   if (u == 7)
                                     throw std::runtime_error("unit 7");
                                 }),
               std::runtime_error);
  int sum = 0;
  g.parallelDynamic(4, [&](int64_t u, int) { __atomic_add_fetch(&sum, static_cast<int>(u), __ATOMIC_RELAXED); });
  EXPECT_EQ(sum, 6);
}

namespace {
/// Attaches groups[i] to the board as group i.
void attachAll(HelpBoard &board, std::initializer_list<ThreadGroup *> groups) {
  int i = 0;
  for (ThreadGroup *g : groups)
    g->attachBoard(board, i++);
}

/// A thread of board group `self` that calls helpOnce until destroyed, counting the units it ran.
struct Helper {
  std::atomic<bool> stop{false};
  std::atomic<long> helped{0};
  std::thread thread;
  Helper(HelpBoard &board, int self)
      : thread([this, &board, self] {
          while (!stop.load())
            helped += board.helpOnce(self);
        }) {}
  ~Helper() {
    stop = true;
    thread.join();
  }
};

/// Yields until done() holds or 10 s have passed: a unit that waits for a helper's unit, so a descheduled
/// helper thread can neither make a test pass vacuously nor fail it by luck.
template <typename Done> void waitAWhileFor(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
}
} // namespace

// A HelpBoard: a thread of another group runs units of a posted job under its own thread index, every
// unit runs once, and a withdrawn job is never touched again.
TEST(HelpBoard, HelperRunsUnitsOfAPostedJobOnceUnderItsOwnIndex) {
  for (int ownerThreads : {1, 2}) {
    HelpBoard board(3);
    ThreadGroup a(ownerThreads), b(1), c(1);
    attachAll(board, {&a, &b, &c});
    EXPECT_EQ(a.slots(), ownerThreads + 3);
    EXPECT_FALSE(board.helpOnce(1)) << "nothing is posted";
    const int64_t n = 400;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> byHelper{0}, badIndex{0};
    std::optional<Helper> helper(std::in_place, board, 2); // group c's thread
    a.parallelDynamic(n, [&](int64_t u, int thread) {
      hits[static_cast<size_t>(u)]++;
      if (thread == ownerThreads + 2)
        byHelper++;
      else if (thread < 0 || thread >= ownerThreads)
        badIndex++;
      std::memset(a.threadScratch(thread, 256), static_cast<int>(u & 0xff), 256); // own scratch per index
      if (thread < ownerThreads) // the owner's threads wait until the helper has run a unit
        waitAWhileFor([&] { return byHelper.load() > 0; });
    });
    helper.reset();
    for (int64_t u = 0; u < n; ++u)
      ASSERT_EQ(hits[static_cast<size_t>(u)].load(), 1) << "unit " << u;
    EXPECT_GT(byHelper.load(), 0) << "the helper ran no unit in 10 s";
    EXPECT_EQ(badIndex.load(), 0);
    EXPECT_FALSE(board.helpOnce(2)) << "the job was withdrawn";
  }
}

TEST(HelpBoard, BackToBackJobsWithHelpersRunEveryUnitOnce) {
  HelpBoard board(2);
  ThreadGroup a(1), b(2);
  attachAll(board, {&a, &b});
  Helper helper(board, 1);
  std::atomic<long> &helped = helper.helped;
  // Each job writes its own serial: a helper that ran a unit of a withdrawn job would write a stale one.
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = 1 + job % 7;
    std::vector<int> got(static_cast<size_t>(n), -1);
    a.parallelDynamic(n, [&](int64_t u, int thread) {
      got[static_cast<size_t>(u)] = job;
      if (job == 1 && thread == 0) // one job waits for a helped unit: the test is never vacuous
        waitAWhileFor([&] { return helped.load() > 0; });
    });
    for (int64_t u = 0; u < n; ++u)
      ASSERT_EQ(got[static_cast<size_t>(u)], job) << "job " << job << " unit " << u;
    // b's jobs go through the board too (two threads of its own), while a's thread is idle.
    std::atomic<int> sum{0};
    b.parallelDynamic(5, [&](int64_t u, int) { sum += static_cast<int>(u); });
    ASSERT_EQ(sum.load(), 10);
  }
  EXPECT_GT(helped.load(), 0);
}

TEST(HelpBoard, AHelpersExceptionReachesTheOwner) {
  HelpBoard board(2);
  ThreadGroup a(1), b(1);
  attachAll(board, {&a, &b});
  std::optional<Helper> helper(std::in_place, board, 1);
  // Every unit a helper runs throws; the owner's units wait until a helper's unit has thrown.
  std::atomic<bool> thrown{false};
  EXPECT_THROW(a.parallelDynamic(200,
                                 [&](int64_t, int thread) {
                                   if (thread != 0) {
                                     thrown = true;
                                     throw std::runtime_error("helper unit failed");
                                   }
                                   waitAWhileFor([&] { return thrown.load(); });
                                 }),
               std::runtime_error);
  helper.reset();
  // The group stays usable and the board is clear.
  std::atomic<int> runs{0};
  a.parallelDynamic(10, [&](int64_t, int) { runs++; });
  EXPECT_EQ(runs.load(), 10);
  EXPECT_THROW(HelpBoard(0), std::invalid_argument);
  EXPECT_THROW(a.attachBoard(board, 2), std::invalid_argument);
}
