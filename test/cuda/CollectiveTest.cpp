//===- CollectiveTest.cpp - loopback collectives on CUDA ------------------------===//
//
// AllReduce (a bucket, in place and out of place), ReduceScatter and AllGather over 2 and 3 logical
// devices on one GPU (the loopback kernel), with uneven and empty shares, against the CPU backend's
// shared-memory collectives. NCCL (distinct GPUs) is not exercised here: it needs two GPUs. Skips visibly
// without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(CudaKernels, LoopbackCollectivesOnTwoAndThreeDevices) {
  TPC_REQUIRE_GPU();
  for (int nd : {2, 3}) {
    SCOPED_TRACE(std::to_string(nd) + " devices");
    PlanMaker mk(nd, 4, 64);
    std::vector<int32_t> ar(nd), ar2(nd), arOut(nd), rs(nd), ag(nd);
    const int64_t parts[3] = {5, 0, 3}; // uneven, one empty share
    int64_t whole = 0;
    for (int d = 0; d < nd; ++d)
      whole += parts[d];
    for (int d = 0; d < nd; ++d) {
      int32_t a = mk.tokenInput(d, {7}, randomFloats(4 * 7, 30 + d));
      int32_t b = mk.tokenInput(d, {3, 2}, randomFloats(4 * 6, 40 + d));
      ar[d] = mk.act(d, {-1, 7});
      ar2[d] = b;
      arOut[d] = mk.act(d, {-1, 3, 2});
      mk.b(d).step(OpKind::AllReduce, {a, b}, {ar[d], arOut[d]}); // a bucket, one out of place
      int32_t x = mk.tokenInput(d, {whole, 2}, randomFloats(4 * whole * 2, 50 + d));
      rs[d] = mk.act(d, {-1, parts[d], 2});
      mk.b(d).step(OpKind::ReduceScatter, {x}, {rs[d]}, {1});
      int32_t part = mk.tokenInput(d, {3, parts[d] ? parts[d] : 1}, randomFloats(4 * 3 * 5, 60 + d));
      int32_t pv = mk.act(d, {-1, 3, parts[d]});
      mk.b(d).step(OpKind::Slice, {part}, {pv}, {2, 0, parts[d]});
      ag[d] = mk.act(d, {-1, 3, whole});
      mk.b(d).step(OpKind::AllGather, {pv}, {ag[d]}, {2});
    }
    Pair p = runBoth(mk, {{0, 4}});
    for (int d = 0; d < nd; ++d) {
      expectClose(p, d, ar[d], 4, 1e-6, "all_reduce");
      expectClose(p, d, arOut[d], 4, 1e-6, "all_reduce out of place");
      if (parts[d] > 0) // an empty share has no data to compare
        expectClose(p, d, rs[d], 4, 1e-6, "reduce_scatter");
      expectClose(p, d, ag[d], 4, 0, "all_gather");
    }
  }
}

} // namespace
