//===- CommunicatorTest.cpp - the CUDA backend's communicators against host sums ---===//
//
// The loopback communicator (3 ranks on GPU 0) and, where 2 GPUs and libnccl are present, the NCCL one,
// called directly as the CUDA session calls them (one group call for all ranks, each on its own stream):
// a bucketed all-reduce in place, all-gather and reduce-scatter with uneven and empty parts, and a
// broadcast of i32, against sums computed on the host in rank order (the loopback kernel adds in rank
// order, so its results are exact; NCCL's order differs, so it gets a tolerance). A call that leaves a
// rank out is an error that aborts the communicator, and every later call then fails. The per-rank
// communicators of a multi-process job (RankCommunicators.h: MPI on host-staged buffers, NCCL per rank) go
// through the same checks, each rank called from its own thread as the ranks of a job call them, with an
// in-process host communicator standing in for MPI. Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/cuda/Communicators.h"
#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/RankCommunicators.h"

#include <thread>

#include <cuda_runtime.h>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// One rank's GPU, stream and buffers, with host copies of what goes up and comes back.
struct Rank {
  int gpu = 0;
  cudaStream_t stream = nullptr;
  std::vector<cuda::GpuAlloc> bufs;
  ~Rank() {
    if (stream) {
      cudaSetDevice(gpu);
      cudaStreamDestroy(stream);
    }
  }
  /// A device buffer holding `v`.
  float *upload(const std::vector<float> &v) {
    bufs.emplace_back();
    EXPECT_EQ(bufs.back().allocate(gpu, std::max<size_t>(v.size(), 1) * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(bufs.back().p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    return reinterpret_cast<float *>(bufs.back().p);
  }
  std::vector<float> download(const float *p, size_t n) {
    std::vector<float> v(n);
    cudaSetDevice(gpu);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

/// Runs every collective on `c` (ranks on `gpus`) and compares with host sums within `tol`; `groupCall`:
/// also checks that a call leaving a rank out fails (a group communicator's rule).
void checkCommunicator(comm::Communicator &c, const std::vector<int> &gpus, float tol, bool groupCall = true) {
  const int n = static_cast<int>(gpus.size());
  ASSERT_EQ(c.size(), n);
  EXPECT_TRUE(c.streamOrdered());
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].gpu = gpus[r];
    ASSERT_EQ(cudaSetDevice(gpus[r]), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking), cudaSuccess);
  }
  auto expectNear = [&](const std::vector<float> &want, const std::vector<float> &got,
                        const std::string &what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(want[i], got[i], tol) << what << " element " << i;
  };

  // All-reduce of a bucket of two tensors (7 and 5 elements), in place.
  std::vector<std::vector<float>> a(n), b(n);
  std::vector<float> sumA(7, 0), sumB(5, 0);
  std::vector<comm::AllReduceEntry> ar;
  std::vector<float *> da(n), db(n);
  for (int r = 0; r < n; ++r) {
    a[r] = randomFloats(7, 100 + r);
    b[r] = randomFloats(5, 200 + r);
    for (size_t i = 0; i < 7; ++i)
      sumA[i] += a[r][i];
    for (size_t i = 0; i < 5; ++i)
      sumB[i] += b[r][i];
    da[r] = ranks[r].upload(a[r]);
    db[r] = ranks[r].upload(b[r]);
    ar.push_back({r, {{da[r], 7}, {db[r], 5}}, ranks[r].stream});
  }
  auto ok = c.allReduce(ar);
  ASSERT_TRUE(ok) << ok.message();
  for (int r = 0; r < n; ++r) {
    expectNear(sumA, ranks[r].download(da[r], 7), "all-reduce tensor 0 on rank " + std::to_string(r));
    expectNear(sumB, ranks[r].download(db[r], 5), "all-reduce tensor 1 on rank " + std::to_string(r));
  }

  // All-gather and reduce-scatter over [outer 2, parts, inner 3] with uneven parts, one of them empty.
  comm::AxisParts layout;
  layout.outer = 2;
  layout.inner = 3;
  for (int r = 0; r < n; ++r)
    layout.parts.push_back(r == 1 ? 0 : 2 + r);
  const int64_t total = layout.total(), whole = layout.outer * total * layout.inner;
  std::vector<float> gathered(whole), scattered(whole, 0);
  std::vector<comm::AllGatherEntry> ag;
  std::vector<comm::ReduceScatterEntry> rs;
  std::vector<float *> parts(n), wholes(n), rsWholes(n), rsParts(n);
  for (int r = 0; r < n; ++r) {
    const int64_t part = layout.outer * layout.parts[r] * layout.inner;
    std::vector<float> mine = randomFloats(part, 300 + r), w = randomFloats(whole, 400 + r);
    for (int64_t o = 0; o < layout.outer; ++o)
      for (int64_t j = 0; j < layout.parts[r] * layout.inner; ++j)
        gathered[(o * total + layout.offset(r)) * layout.inner + j] =
            mine[o * layout.parts[r] * layout.inner + j];
    for (int64_t i = 0; i < whole; ++i)
      scattered[i] += w[i];
    parts[r] = ranks[r].upload(mine);
    wholes[r] = ranks[r].upload(std::vector<float>(whole, 7.0f)); // overwritten: the gather zeroes it
    rsWholes[r] = ranks[r].upload(w);
    rsParts[r] = ranks[r].upload(std::vector<float>(part, 0.0f));
    ag.push_back({r, {parts[r], part}, {wholes[r], whole}, ranks[r].stream});
    rs.push_back({r, {rsWholes[r], whole}, {rsParts[r], part}, ranks[r].stream});
  }
  ok = c.allGather(ag, layout);
  ASSERT_TRUE(ok) << ok.message();
  ok = c.reduceScatter(rs, layout);
  ASSERT_TRUE(ok) << ok.message();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered, ranks[r].download(wholes[r], whole))
        << "all-gather on rank " << r << " (exact: zeros added)";
    std::vector<float> want;
    for (int64_t o = 0; o < layout.outer; ++o)
      for (int64_t j = 0; j < layout.parts[r] * layout.inner; ++j)
        want.push_back(scattered[(o * total + layout.offset(r)) * layout.inner + j]);
    expectNear(want, ranks[r].download(rsParts[r], want.size()),
               "reduce-scatter on rank " + std::to_string(r));
  }

  // Broadcast of i32 ids from the last rank (bytes move unchanged).
  const std::vector<int32_t> ids = {3, -1, 1 << 30};
  std::vector<comm::BroadcastEntry> bc;
  std::vector<float *> bufs(n);
  for (int r = 0; r < n; ++r) {
    std::vector<float> bytes(ids.size(), 0.0f);
    if (r == n - 1)
      std::memcpy(bytes.data(), ids.data(), ids.size() * 4);
    bufs[r] = ranks[r].upload(bytes);
    bc.push_back({r, {bufs[r], int64_t(ids.size())}, ranks[r].stream});
  }
  ok = c.broadcast(bc, n - 1, comm::ElemType::I32);
  ASSERT_TRUE(ok) << ok.message();
  for (int r = 0; r < n; ++r) {
    std::vector<float> got = ranks[r].download(bufs[r], ids.size());
    std::vector<int32_t> gotIds(ids.size());
    std::memcpy(gotIds.data(), got.data(), ids.size() * 4);
    EXPECT_EQ(gotIds, ids) << "broadcast on rank " << r;
  }

  if (!groupCall)
    return;
  // A call that leaves a rank out fails and aborts; every later call fails too.
  ar.pop_back();
  auto partial = c.allReduce(ar);
  ASSERT_FALSE(partial);
  EXPECT_NE(partial.message().find("must cover every rank"), std::string::npos) << partial.message();
  EXPECT_TRUE(c.aborted());
  ok = c.barrier(c.localRanks());
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.message().find("aborted"), std::string::npos) << ok.message();
}

TEST(CudaCommunicators, LoopbackMatchesRankOrderSums) {
  TPC_REQUIRE_GPU();
  const std::vector<uint64_t> stage(3, 4096);
  auto c = cuda::makeLoopbackCommunicator(0, 3, stage);
  ASSERT_TRUE(c) << c.message();
  EXPECT_STREQ((*c)->name(), "loopback");
  checkCommunicator(**c, {0, 0, 0}, 0.0f);
}

// bf16 payloads (runtime/comm/Bf16Wire.h): the loopback kernel gives the in-process communicator's bits,
// which are not the f32 sums; gathers in the same session stay exact (covered by checkCommunicator's f32
// run above; here only the all-reduce changes). NCCL refuses bf16 (supportsPayload).
TEST(CudaCommunicators, LoopbackBf16IsTheInProcessBf16Sum) {
  TPC_REQUIRE_GPU();
  const int n = 3;
  const int64_t count = 70001; // several blocks, not a multiple of anything
  auto c = cuda::makeLoopbackCommunicator(0, n, std::vector<uint64_t>(n, 4096));
  ASSERT_TRUE(c) << c.message();
  ASSERT_TRUE((*c)->supportsPayload(comm::Payload::BF16));
  (*c)->setPayload(comm::Payload::BF16);
  std::vector<Rank> ranks(n);
  std::vector<std::vector<float>> host(n), f32(n);
  std::vector<float *> dev(n);
  std::vector<comm::AllReduceEntry> ar;
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking), cudaSuccess);
    host[r] = randomFloats(count, 500 + r);
    dev[r] = ranks[r].upload(host[r]);
    ar.push_back({r, {{dev[r], count}}, ranks[r].stream});
  }
  f32 = host;
  auto ok = (*c)->allReduce(ar);
  ASSERT_TRUE(ok) << ok.message();
  comm::InProcessCommunicator cpu(n), cpu32(n);
  cpu.setPayload(comm::Payload::BF16);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      EXPECT_TRUE(cpu.allReduce(r, {{host[r].data(), count}}));
      EXPECT_TRUE(cpu32.allReduce(r, {{f32[r].data(), count}}));
    });
  for (std::thread &t : th)
    t.join();
  for (int r = 0; r < n; ++r) {
    const std::vector<float> got = ranks[r].download(dev[r], size_t(count));
    EXPECT_EQ(0, std::memcmp(got.data(), host[r].data(), size_t(count) * 4)) << "rank " << r;
    EXPECT_NE(got, f32[r]) << "rank " << r << ": bf16 payloads changed nothing";
  }
}

TEST(CudaCommunicators, NcclMatchesHostSums) {
  TPC_REQUIRE_GPU();
  if (cuda::cudaDeviceCount() < 2)
    GTEST_SKIP() << "NCCL needs two GPUs";
  auto c = cuda::makeNcclCommunicator({0, 1}, {4096, 4096});
  if (!c && c.message().find("cannot be loaded") != std::string::npos)
    GTEST_SKIP() << c.message();
  ASSERT_TRUE(c) << c.message();
  checkCommunicator(**c, {0, 1}, 1e-6f);
}

/// A group call (one entry per rank) spread over per-rank communicators, each rank on its own thread.
class PerRankGroup final : public comm::Communicator {
public:
  explicit PerRankGroup(std::vector<std::shared_ptr<comm::Communicator>> ranks) : ranks_(std::move(ranks)) {}
  const char *name() const override { return ranks_[0]->name(); }
  int size() const override { return int(ranks_.size()); }
  std::vector<int> localRanks() const override {
    std::vector<int> r;
    for (int i = 0; i < size(); ++i)
      r.push_back(i);
    return r;
  }
  bool streamOrdered() const override { return true; }
  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;
  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &l, comm::ElemType t) override {
    return each(l, [&](comm::Communicator &c, const auto &one) { return c.allReduce(one, t); });
  }
  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &l, const comm::AxisParts &p,
                           comm::ElemType t) override {
    return each(l, [&](comm::Communicator &c, const auto &one) { return c.allGather(one, p, t); });
  }
  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &l, const comm::AxisParts &p,
                               comm::ElemType t) override {
    return each(l, [&](comm::Communicator &c, const auto &one) { return c.reduceScatter(one, p, t); });
  }
  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &l, int root, comm::ElemType t) override {
    return each(l, [&](comm::Communicator &c, const auto &one) { return c.broadcast(one, root, t); });
  }
  Expected<void> barrier(const std::vector<int> &r) override {
    std::vector<comm::BroadcastEntry> l;
    for (int i : r)
      l.push_back({i, {}, nullptr});
    return each(l, [&](comm::Communicator &c, const auto &one) { return c.barrier({one[0].rank}); });
  }
  void abort(const std::string &why) override {
    for (auto &c : ranks_)
      c->abort(why);
  }
  bool aborted() const override { return ranks_[0]->aborted(); }

private:
  template <typename E, typename F> Expected<void> each(const std::vector<E> &local, F call) {
    std::vector<Expected<void>> res(local.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < local.size(); ++i)
      threads.emplace_back([&, i] { res[i] = call(*ranks_[local[i].rank], std::vector<E>{local[i]}); });
    for (std::thread &t : threads)
      t.join();
    for (Expected<void> &r : res)
      if (!r)
        return r;
    return {};
  }
  std::vector<std::shared_ptr<comm::Communicator>> ranks_;
};

/// Host-staged communicators of `n` ranks on GPU `gpu` over one in-process host communicator.
std::vector<std::shared_ptr<comm::Communicator>> hostStagedRanks(int n, int gpu) {
  auto host = std::make_shared<comm::InProcessCommunicator>(n);
  std::vector<std::shared_ptr<comm::Communicator>> out;
  for (int r = 0; r < n; ++r) {
    auto c = cuda::makeHostStagedCommunicator(std::make_shared<OneRankOf>(host, r), gpu);
    EXPECT_TRUE(c) << c.message();
    if (c)
      out.push_back(c.take());
  }
  return out;
}

TEST(CudaRankCommunicators, HostStagedRanksSharingAGpuMatchRankOrderSums) {
  TPC_REQUIRE_GPU();
  auto ranks = hostStagedRanks(3, 0);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_STREQ(ranks[0]->name(), "mpi, host-staged");
  PerRankGroup group(ranks);
  checkCommunicator(group, {0, 0, 0}, 0.0f, /*groupCall=*/false); // the host sums in rank order: exact
}

TEST(CudaRankCommunicators, NcclRanksFromOneUniqueIdMatchHostSums) {
  TPC_REQUIRE_GPU();
  if (cuda::cudaDeviceCount() < 2)
    GTEST_SKIP() << "NCCL ranks need two GPUs";
  auto id = cuda::NcclComms::uniqueId();
  if (!id && id.message().find("cannot be loaded") != std::string::npos)
    GTEST_SKIP() << id.message();
  ASSERT_TRUE(id) << id.message();
  // ncclCommInitRank returns when every rank has joined: the ranks join from their own threads.
  std::vector<Expected<std::shared_ptr<comm::Communicator>>> made(2, Error{"not made"});
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { made[r] = cuda::makeNcclRankCommunicator(*id, r, 2, r); });
  for (std::thread &t : threads)
    t.join();
  std::vector<std::shared_ptr<comm::Communicator>> ranks;
  for (auto &m : made) {
    ASSERT_TRUE(m) << m.message();
    ranks.push_back(m.take());
  }
  PerRankGroup group(ranks);
  checkCommunicator(group, {0, 1}, 1e-6f, /*groupCall=*/false);
}

TEST(CudaRankCommunicators, ACallForAnotherRankFailsAndAbortsEveryLaterCall) { // no GPU needed: refused up front
  auto ranks = hostStagedRanks(2, 0);
  ASSERT_EQ(ranks.size(), 2u);
  float x = 1.0f;
  auto wrong = ranks[0]->allReduce(1, {{&x, 1}});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.message().find("exactly this process's rank 0"), std::string::npos) << wrong.message();
  EXPECT_TRUE(ranks[0]->aborted());
  auto later = ranks[0]->allReduce(0, {{&x, 1}});
  ASSERT_FALSE(later);
  EXPECT_NE(later.message().find("aborted"), std::string::npos) << later.message();
}

TEST(CudaRankCommunicators, HostStagingNeedsABlockingOneRankHostCommunicator) { // no GPU needed
  auto two = cuda::makeHostStagedCommunicator(std::make_shared<comm::InProcessCommunicator>(2), 0);
  ASSERT_FALSE(two);
  EXPECT_NE(two.message().find("one local rank"), std::string::npos) << two.message();
}

TEST(CudaCommunicators, LoopbackRefusesMoreRanksThanItsKernelTakes) { // no GPU needed: refused up front
  auto c = cuda::makeLoopbackCommunicator(0, 17, std::vector<uint64_t>(17, 0));
  ASSERT_FALSE(c);
  EXPECT_NE(c.message().find("at most 16"), std::string::npos) << c.message();
}

} // namespace
