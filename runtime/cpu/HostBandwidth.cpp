//===- HostBandwidth.cpp - the host's memory bandwidth probes -------------===//
//
// The probes behind `tpc run --bench`'s CPU roofline (CpuSession.h declares them): a read-only streaming sum
// over a buffer well past the last-level cache (what decode does to its weights), and the copy figure it
// replaced, kept beside it under its own name. Both with the run's thread count; the best of the passes
// after the first (which warms the pages and the clocks).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/CpuSession.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tpc::rt::cpu {

double hostReadBandwidth(int threads) {
  threads = std::max(1, threads);
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0)
    llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const size_t words = std::max<size_t>(size_t(512) << 20, 4 * static_cast<size_t>(std::max(0L, llc))) / 8;
  std::vector<uint64_t> buf(words, 1); // touched here, so no pass pays a page fault
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        const size_t lo = words * i / threads, hi = words * (i + 1) / threads;
        // Eight independent sums: no add waits for the previous one, the loads stream at the memory's rate.
        uint64_t s[8] = {};
        size_t j = lo;
        for (; j + 8 <= hi; j += 8)
          for (int l = 0; l < 8; ++l)
            s[l] += buf[j + l];
        for (; j < hi; ++j)
          s[0] += buf[j];
        sums[static_cast<size_t>(i)] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
      });
    for (std::thread &t : pool)
      t.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t total = 0;
    for (uint64_t v : sums)
      total += v;
    if (total != words) // every word is 1: a pass that skipped loads would not sum to the word count
      return 0;
    if (r > 0 && sec > 0)
      best = std::max(best, 8.0 * double(words) / sec);
  }
  return best;
}

double hostCopyBandwidth(int threads) {
  const size_t bytes = size_t(256) << 20;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  threads = std::max(1, threads);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        const size_t lo = bytes * i / threads, hi = bytes * (i + 1) / threads;
        std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
      });
    for (std::thread &t : pool)
      t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0)
      best = std::max(best, 2.0 * double(bytes) / s);
  }
  return best;
}

} // namespace tpc::rt::cpu
