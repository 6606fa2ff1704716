//===- bench_matmul.cpp - CPU matmul throughput -----------------------------===//
//
// Decode (m = 1): GB/s of weight bytes streamed, the number that bounds tokens/s on a memory-bound CPU.
// Prefill (m = 512): GFLOP/s (2 m n k). Shapes 4096x4096 and 11008x4096 (a 7B model's attention and FFN
// matrices); types Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16 (or those named by --types); 1 and 2 threads (or the
// counts given as arguments).
//
// Usage: tpc-bench-matmul [--quick] [--prefill] [--types q4_K,q6_K] [threads...]
// --prefill: only the prefill column on the 4096x4096 shape (kernel A/B comparisons; q5_0 included).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/Quant.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

using namespace tpc;
using namespace tpc::rt::cpu;

namespace {

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Runs fn repeatedly for at least minTime seconds (after one warm-up call); returns the fastest call's
/// seconds. The fastest, not the mean, because the build machines are shared: other processes only ever
/// add time.
/// cpuPerCall gets the process CPU seconds per call (all threads; spinning workers count), which is what
/// the kernels cost when other processes compete for the cores.
template <typename Fn> double timeIt(Fn fn, double minTime, double *cpuPerCall = nullptr) {
  fn();
  double start = seconds(), now = start, best = 1e30, cpu0 = cpuSeconds();
  int reps = 0;
  do {
    double t0 = seconds();
    fn();
    now = seconds();
    best = std::min(best, now - t0);
    ++reps;
  } while (now - start < minTime);
  if (cpuPerCall)
    *cpuPerCall = (cpuSeconds() - cpu0) / reps;
  return best;
}

} // namespace

int main(int argc, char **argv) {
  bool quick = false, prefillOnly = false;
  std::string only; // --types: comma-separated ggml type names
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--prefill") == 0)
      prefillOnly = true;
    else if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc)
      only = "," + std::string(argv[++i]) + ",";
    else
      threads.push_back(std::atoi(argv[i]));
  }
  if (threads.empty())
    threads = {1, 2};
  std::printf("isa: %s\n", isaName(activeIsa()));
  // Hand-off latency: decode issues thousands of small jobs per token.
  for (int th : threads) {
    ThreadGroup g(th);
    std::vector<int64_t> sink(static_cast<size_t>(th) * 16);
    const int reps = 20000;
    double t0 = seconds();
    for (int r = 0; r < reps; ++r)
      g.parallelFor(th, [&](int64_t b, int64_t, int t) { sink[static_cast<size_t>(t) * 16] += b; });
    std::printf("parallelFor hand-off, %d thread(s): %.2f us per job\n", th, (seconds() - t0) / reps * 1e6);
  }
  const GGMLType types[] = {GGMLType::Q4_0, GGMLType::Q5_0, GGMLType::Q8_0, GGMLType::Q4_K,
                            GGMLType::Q5_K, GGMLType::Q6_K, GGMLType::F16};
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}};
  const int64_t k = 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> pool(k + 4096);
  for (float &v : pool)
    v = dist(rng);
  const int64_t mPrefill = quick ? 64 : 512;
  std::vector<float> x(static_cast<size_t>(mPrefill * k)), y(static_cast<size_t>(mPrefill * 11008));
  for (float &v : x)
    v = dist(rng);

  // "cpu" columns divide by CPU time instead of wall time: per core-second, robust to a busy machine.
  std::printf("%-6s %-11s %-3s %10s %11s %14s %15s %14s\n", "type", "shape", "thr", "decode ms",
              "decode GB/s", "GB/s per cpu-s", "prefill GFLOP/s", "GFLOP per cpu-s");
  for (GGMLType t : types) {
    if (!only.empty() && only.find("," + std::string(ggmlTypeName(t)) + ",") == std::string::npos)
      continue;
    for (auto &shape : shapes) {
      int64_t n = shape[0];
      if (prefillOnly && n != 4096)
        continue;
      size_t rowBytes = static_cast<size_t>(*ggmlRowBytes(t, k));
      std::vector<uint8_t> w(rowBytes * static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r)
        quantizeRow(t, pool.data() + (r * 37) % 4096, w.data() + rowBytes * static_cast<size_t>(r), k);
      for (int th : threads) {
        ThreadGroup g(th);
        MatmulArgs a;
        a.w = w.data();
        a.wType = t;
        a.n = n;
        a.k = k;
        a.wRowStride = rowBytes;
        a.x = x.data();
        a.xRowStride = static_cast<size_t>(k);
        a.y = y.data();
        a.yRowStride = static_cast<size_t>(n);
        a.m = 1;
        double cpu = 1e-9, dt = 1e-9;
        if (!prefillOnly)
          dt = timeIt([&] { matmul(a, g); }, quick ? 0.2 : 1.0, &cpu);
        double gbs = static_cast<double>(w.size()) / dt / 1e9,
               gbsCpu = static_cast<double>(w.size()) / cpu / 1e9;
        double gflops = 0, gflopsCpu = 0;
        if (n == 4096) {
          a.m = mPrefill;
          double pcpu = 0;
          double pt = timeIt([&] { matmul(a, g); }, quick ? 0.2 : 1.0, &pcpu);
          double flop = 2.0 * static_cast<double>(mPrefill) * static_cast<double>(n) * static_cast<double>(k);
          gflops = flop / pt / 1e9;
          gflopsCpu = flop / pcpu / 1e9;
        }
        std::printf("%-6s %5lldx%-5lld %-3d %10.3f %11.2f %14.2f %15.1f %14.1f\n", ggmlTypeName(t),
                    (long long)n, (long long)k, th, dt * 1e3, gbs, gbsCpu, gflops, gflopsCpu);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
