//===- CudaTestUtil.h - run a hand-built plan on the CPU and on CUDA -*- C++ -*-===//
//
// The kernel tests build one-op plans with PlanMaker (test/runtime/exec/ExecTestUtil.h: weights in
// memory, random inputs through GET_ROWS/COPY), open the same plan on the CPU backend (the reference)
// and on CUDA, run both and compare chosen tensors with a tolerance. Every test skips with a visible
// message where no GPU is present.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_CUDA_CUDATESTUTIL_H
#define TPC_TEST_CUDA_CUDATESTUTIL_H

#include "runtime/cuda/CudaSession.h"
#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

/// Skips the current test when this machine has no CUDA GPU.
#define TPC_REQUIRE_GPU()                                                                                    \
  do {                                                                                                       \
    if (::tpc::rt::cuda::cudaDeviceCount() == 0)                                                             \
      GTEST_SKIP() << "no CUDA GPU visible: CUDA backend test skipped";                                      \
  } while (0)

namespace tpc::rt::test {

/// Both backends on one plan, after evaluating the same calls.
struct Pair {
  std::unique_ptr<Session> cpu;
  std::unique_ptr<cuda::CudaSession> gpu;
};

/// Opens `m`'s plan on both backends (context `ctx`, loopback GPUs) and evaluates each call of `calls`
/// (token ids = positions = start .. start + n - 1) on both.
inline Pair runBoth(PlanMaker &m, const std::vector<std::pair<int32_t, int32_t>> &calls, int64_t ctx = 64,
                    cuda::CudaOptions co = {}) {
  Pair p;
  SessionOptions o = m.options(2, ctx);
  auto c = Session::open(m.plan, o);
  EXPECT_TRUE(c) << (c ? "" : c.message());
  if (co.gpus.empty())
    co.gpus = {0}; // every logical device on GPU 0: the loopback path
  auto g = cuda::CudaSession::open(m.plan, o, co);
  EXPECT_TRUE(g) << (g ? "" : g.message());
  if (!c || !g)
    return p;
  p.cpu = std::move(*c);
  p.gpu = std::move(*g);
  for (auto [start, n] : calls) {
    std::vector<int32_t> ids(n);
    for (int32_t i = 0; i < n; ++i)
      ids[i] = start + i;
    auto a = p.cpu->evaluate(ids, ids);
    auto b = p.gpu->evaluate(ids, ids);
    EXPECT_TRUE(a) << (a ? "" : a.message());
    EXPECT_TRUE(b) << (b ? "" : b.message());
  }
  return p;
}

/// max |ref - got| / max |ref| (infinite when NaNs differ): errors judged against the tensor's magnitude,
/// so sums that cancel to near zero do not count as large relative errors.
inline double relErr(const std::vector<float> &ref, const std::vector<float> &got) {
  EXPECT_EQ(ref.size(), got.size());
  double mx = 0, worst = 0;
  for (size_t i = 0; i < std::min(ref.size(), got.size()); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i]))
      return INFINITY;
    mx = std::max(mx, double(std::fabs(ref[i])));
    worst = std::max(worst, std::fabs(double(ref[i]) - got[i]));
  }
  return mx > 0 ? worst / mx : worst;
}

/// Expects tensor `id` of `device` to agree between the backends within `tol` (relErr).
inline void expectClose(const Pair &p, size_t device, int32_t id, int64_t tokens, double tol,
                        const std::string &what) {
  ASSERT_TRUE(p.cpu && p.gpu) << what;
  auto ref = p.cpu->tensorData(device, id, tokens);
  auto got = p.gpu->tensorData(device, id, tokens);
  ASSERT_FALSE(ref.empty()) << what;
  ASSERT_EQ(ref.size(), got.size()) << what;
  const double e = relErr(ref, got);
  EXPECT_LE(e, tol) << what << ": relative error " << e;
}

} // namespace tpc::rt::test

#endif // TPC_TEST_CUDA_CUDATESTUTIL_H
