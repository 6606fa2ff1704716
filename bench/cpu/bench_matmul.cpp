//===- bench_matmul.cpp - CPU matmul throughput -----------------------------===//
//
// Decode (m = 1): GB/s of weight bytes streamed, the number that bounds tokens/s on a memory-bound CPU.
// Prefill (m = 512): GFLOP/s (2 m n k). Shapes 4096x4096 and 11008x4096 (a 7B model's attention and FFN
// matrices); types Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, F16 (or those named by --types); 1 and 2 threads (or the
// counts given as arguments).
//
// --prefill: only the prefill column on the 4096x4096 shape (kernel A/B comparisons; q5_0 included).
// --shapes NxK,... replaces the shapes (decode only when K != 4096: prefill keeps its 4096x4096 case), e.g.
// Gemma 3 270M's tied output projection 262144x640; --tokens 1,4,8 times decode at each token count (rows
// of weights streamed once for all of them), with ms per call and the ratio to one token.
//
// Usage: tpc-bench-matmul [--quick] [--prefill] [--types q4_K,q6_K] [--shapes 262144x640] [--tokens 1,4]
//        [threads...]
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/Quant.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
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
  std::vector<std::array<int64_t, 2>> shapes = {{4096, 4096}, {11008, 4096}};
  std::vector<int64_t> tokens = {1};
  auto numbers = [](const char *flag, const std::string &list, char sep) {
    std::vector<int64_t> v;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, sep)) {
      char *end = nullptr;
      long long x = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || x <= 0) {
        std::fprintf(stderr, "tpc-bench-matmul: %s: '%s' is not a positive number\n", flag, item.c_str());
        std::exit(2);
      }
      v.push_back(x);
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--prefill") == 0) {
      prefillOnly = true;
    } else if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
      only = "," + std::string(argv[++i]) + ",";
    } else if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) {
      shapes.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) {
        std::vector<int64_t> nk = numbers("--shapes", item, 'x');
        if (nk.size() != 2) {
          std::fprintf(stderr, "tpc-bench-matmul: --shapes: '%s' is not NxK (e.g. 262144x640)\n",
                       item.c_str());
          return 2;
        }
        shapes.push_back({nk[0], nk[1]});
      }
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      tokens = numbers("--tokens", argv[++i], ',');
    } else {
      threads.push_back(std::atoi(argv[i]));
    }
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
  int64_t maxK = 4096, maxN = 11008;
  for (auto &shape : shapes)
    maxN = std::max(maxN, shape[0]), maxK = std::max(maxK, shape[1]);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> pool(static_cast<size_t>(maxK + 4096));
  for (float &v : pool)
    v = dist(rng);
  const int64_t mPrefill = quick ? 64 : 512;
  const int64_t maxM = std::max(mPrefill, *std::max_element(tokens.begin(), tokens.end()));
  std::vector<float> x(static_cast<size_t>(maxM * maxK)), y(static_cast<size_t>(maxM * maxN));
  for (float &v : x)
    v = dist(rng);

  // "cpu" columns divide by CPU time instead of wall time: per core-second, robust to a busy machine.
  std::printf("%-6s %-12s %-3s %-4s %10s %8s %11s %14s %15s %14s\n", "type", "shape", "thr", "tok",
              "decode ms", "x 1 tok", "decode GB/s", "GB/s per cpu-s", "prefill GFLOP/s", "GFLOP per cpu-s");
  for (GGMLType t : types) {
    if (!only.empty() && only.find("," + std::string(ggmlTypeName(t)) + ",") == std::string::npos)
      continue;
    for (auto &shape : shapes) {
      const int64_t n = shape[0], k = shape[1];
      if (!ggmlRowBytes(t, k))
        continue; // k is not a multiple of this type's block
      if (prefillOnly && (n != 4096 || k != 4096))
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
        double oneToken = 0;
        for (int64_t m : tokens) {
          a.m = m;
          double cpu = 1e-9, dt = 1e-9;
          if (!prefillOnly)
            dt = timeIt([&] { matmul(a, g); }, quick ? 0.2 : 1.0, &cpu);
          if (oneToken == 0)
            oneToken = dt;
          double gbs = static_cast<double>(w.size()) / dt / 1e9,
                 gbsCpu = static_cast<double>(w.size()) / cpu / 1e9;
          double gflops = 0, gflopsCpu = 0;
          if (n == 4096 && k == 4096 && m == tokens.back()) {
            a.m = mPrefill;
            double pcpu = 0;
            double pt = timeIt([&] { matmul(a, g); }, quick ? 0.2 : 1.0, &pcpu);
            double flop =
                2.0 * static_cast<double>(mPrefill) * static_cast<double>(n) * static_cast<double>(k);
            gflops = flop / pt / 1e9;
            gflopsCpu = flop / pcpu / 1e9;
          }
          std::printf("%-6s %6lldx%-5lld %-3d %-4lld %10.3f %8.2f %11.2f %14.2f %15.1f %14.1f\n",
                      ggmlTypeName(t), (long long)n, (long long)k, th, (long long)m, dt * 1e3, dt / oneToken,
                      gbs, gbsCpu, gflops, gflopsCpu);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
