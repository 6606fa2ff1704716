//===- CudaTestUtil.h - run a hand-built plan on the CPU and on CUDA -*- C++ -*-===//
//
// The kernel tests build one-op plans with PlanMaker (test/runtime/exec/ExecTestUtil.h: weights in
// memory, random inputs through GET_ROWS/COPY), open the same plan on the CPU backend (the reference)
// and on CUDA (openCuda: CudaOptions of the test's choosing, host steps on the built-in CPU backend), run
// both and compare chosen tensors with a tolerance. Random weights of every type the
// kernels read come with their exact dequantized values. Every test skips with a visible message where no
// GPU is present.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_CUDA_CUDATESTUTIL_H
#define TPC_TEST_CUDA_CUDATESTUTIL_H

#include "runtime/backends/Backends.h"
#include "runtime/comm/Communicator.h"
#include "runtime/cuda/CudaSession.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"
#include "test/cuda/HalfFields.h"
#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

/// Skips the current test when this machine has no CUDA GPU.
#define TPC_REQUIRE_GPU()                                                                                    \
  do {                                                                                                       \
    if (::tpc::rt::cuda::cudaDeviceCount() == 0)                                                             \
      GTEST_SKIP() << "no CUDA GPU visible: CUDA backend test skipped";                                      \
  } while (0)

namespace tpc::rt::test {

/// One rank of a host communicator, as the MPI communicator of one process presents itself.
class OneRankOf : public comm::Communicator {
public:
  OneRankOf(std::shared_ptr<comm::Communicator> all, int rank) : all_(std::move(all)), rank_(rank) {}
  const char *name() const override { return "one rank"; }
  int size() const override { return all_->size(); }
  std::vector<int> localRanks() const override { return {rank_}; }
  bool streamOrdered() const override { return false; }
  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;
  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &l, comm::ElemType t) override {
    return all_->allReduce(l, t);
  }
  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &l, const comm::AxisParts &p,
                           comm::ElemType t) override {
    return all_->allGather(l, p, t);
  }
  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &l, const comm::AxisParts &p,
                               comm::ElemType t) override {
    return all_->reduceScatter(l, p, t);
  }
  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &l, int root, comm::ElemType t) override {
    return all_->broadcast(l, root, t);
  }
  Expected<void> barrier(const std::vector<int> &r) override { return all_->barrier(r); }
  void abort(const std::string &why) override { all_->abort(why); }
  bool aborted() const override { return all_->aborted(); }

private:
  std::shared_ptr<comm::Communicator> all_;
  int rank_;
};


/// Random rows of type t (every quant bit pattern, sane scales); `deq` gets their exact values.
inline std::vector<uint8_t> randomWeight(GGMLType t, int64_t rows, int64_t k, uint32_t seed,
                                         std::vector<float> &deq) {
  std::mt19937 rng(seed);
  const uint64_t rb = *ggmlRowBytes(t, k);
  std::vector<uint8_t> bytes(rows * rb);
  if (t == GGMLType::F32 || t == GGMLType::F16 || t == GGMLType::BF16) {
    auto v = randomFloats(rows * k, seed);
    for (int64_t i = 0; i < rows * k; ++i) {
      if (t == GGMLType::F32)
        std::memcpy(&bytes[i * 4], &v[i], 4);
      else {
        uint16_t h = t == GGMLType::F16 ? fp32ToFp16(v[i]) : fp32ToBf16(v[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  } else {
    for (uint8_t &b : bytes)
      b = static_cast<uint8_t>(rng());
    const auto &info = ggmlTypeInfo(t);
    std::uniform_real_distribution<float> sc(0.001f, 0.02f);
    for (uint64_t b = 0; b < bytes.size() / info.blockBytes; ++b) {
      for (int off : halfFields(t)) {
        uint16_t h = fp32ToFp16(sc(rng));
        std::memcpy(&bytes[b * info.blockBytes + off], &h, 2);
      }
      if (t == GGMLType::MXFP4) // E8M0 scale 2^(e - 128): 2^-9 .. 2^-6, the f16 scales' range
        bytes[b * info.blockBytes] = static_cast<uint8_t>(119 + rng() % 4);
    }
  }
  deq.assign(rows * k, 0);
  for (int64_t r = 0; r < rows; ++r)
    dequantizeRow(t, &bytes[r * rb], &deq[r * k], k);
  return bytes;
}

/// Every weight type the CUDA kernels read (cudaSupportsType).
inline constexpr GGMLType kCudaWeightTypes[] = {
    GGMLType::F32,  GGMLType::F16,    GGMLType::BF16,   GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::Q5_0,
    GGMLType::Q5_1, GGMLType::Q8_0,   GGMLType::Q2_K,   GGMLType::Q3_K, GGMLType::Q4_K, GGMLType::Q5_K,
    GGMLType::Q6_K, GGMLType::IQ4_NL, GGMLType::IQ4_XS, GGMLType::MXFP4};

/// Opens `plan` on the CUDA backend with `co` (the registry's "cuda" takes its options from SessionOptions
/// and the environment); host-placed steps run on the built-in CPU backend.
inline Expected<std::unique_ptr<Session>> openCuda(Plan plan, const SessionOptions &o,
                                                   const cuda::CudaOptions &co = {}) {
  return cuda::openCudaSession(std::move(plan), o, co, *builtinBackends().find("cpu"));
}

/// Both backends on one plan, after evaluating the same calls.
struct Pair {
  std::unique_ptr<Session> cpu;
  std::unique_ptr<Session> gpu;
};

/// `plan` opened three ways with options `o`: on the CPU backend, on GPU 0 with CUDA graphs, and on GPU 0
/// without them (a replayed graph must equal the plain run bit for bit). Failures are test failures and
/// leave `ok` false.
struct GraphTrio {
  Pair p;
  std::unique_ptr<Session> plain;
  bool ok = false;
};
inline GraphTrio openGraphTrio(const Plan &plan, const SessionOptions &o) {
  GraphTrio t;
  cuda::CudaOptions co, noGraphs;
  co.gpus = noGraphs.gpus = {0};
  noGraphs.graphs = false;
  auto cpu = Session::open(plan, o);
  auto gpu = openCuda(plan, o, co);
  auto plain = openCuda(plan, o, noGraphs);
  EXPECT_TRUE(cpu && gpu && plain) << (cpu ? gpu ? plain.message() : gpu.message() : cpu.message());
  if (!cpu || !gpu || !plain)
    return t;
  t.p.cpu = std::move(*cpu);
  t.p.gpu = std::move(*gpu);
  t.plain = std::move(*plain);
  t.ok = true;
  return t;
}

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
  auto g = openCuda(m.plan, o, co);
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
