//===- TestSupport.h - small helpers several test suites share ---*- C++ -*-===//
//
// A double-precision reference matmul (the executor's and the CUDA kernels' tests compare with it), seeded
// uniform test data, and a shell runner (the tests that drive the tpc binary).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_COMMON_TESTSUPPORT_H
#define TPC_TEST_COMMON_TESTSUPPORT_H

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <sys/wait.h>
#include <utility>
#include <vector>

namespace tpc::test {

/// y = x . w^T accumulated in double, with w given as dequantized floats: x is m x k, w is n x k.
inline std::vector<float> refMatmul(const std::vector<float> &x, const std::vector<float> &w, int64_t m,
                                    int64_t n, int64_t k) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c)
        s += double(x[i * k + c]) * w[j * k + c];
      y[i * n + j] = static_cast<float>(s);
    }
  return y;
}

/// n floats uniform in [-1, 1) from a fixed seed (the same data on every run and platform's libstdc++).
inline std::vector<float> uniformFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

/// Runs a shell command; returns its exit status (-1 if it did not exit normally) and its stdout (append
/// " 2>&1" to the command for stderr too).
inline std::pair<int, std::string> runShell(const std::string &cmd) {
  std::string out;
  FILE *p = ::popen(cmd.c_str(), "r");
  if (!p)
    return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    out.append(buf, n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

} // namespace tpc::test

#endif // TPC_TEST_COMMON_TESTSUPPORT_H
