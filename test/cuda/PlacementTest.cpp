//===- PlacementTest.cpp - host-placed steps in the CUDA session ----------------===//
//
// --override-tensor ...=cpu as the plan states it: copies to and from pinned host memory around a matmul
// on a host weight slice that the CPU kernels run, bit-equal to the CPU backend, with the host slice kept
// out of device memory. Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include <array>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(CudaKernels, HostPlacedStepsRunOnTheHost) {
  TPC_REQUIRE_GPU();
  // --override-tensor ...=cpu as the plan states it: x copied to the host, a matmul on a host weight slice
  // run by the CPU kernels, its result copied back for a device rms_norm, between device steps that would
  // otherwise fuse with it. The host matmul must equal the CPU backend's bit for bit (the GPU's integer
  // GEMV rounds differently), at one token (decode) and several, and the host slice must not use VRAM.
  const int64_t k = 512, n = 96;
  auto build = [&](Placement where, PlanMaker &mk) {
    std::vector<float> deq;
    int32_t x = mk.tokenInput(0, {k}, randomFloats(8 * k, 71, -2, 2));
    int32_t nw = mk.weightF32(0, {k}, randomFloats(k, 72));
    int32_t w = mk.weightRaw(0, GGMLType::Q4_K, {n, k}, randomWeight(GGMLType::Q4_K, n, k, 73, deq));
    DevicePlan &dp = mk.plan.devices[0];
    dp.weights[dp.tensors[w].index].placement = where;
    auto side = [&](std::vector<int64_t> shape) {
      return where == Placement::Host ? mk.hostAct(0, shape) : mk.act(0, shape);
    };
    int32_t xn = mk.act(0, {-1, k}), xh = side({-1, k}), yh = side({-1, n}), y = mk.act(0, {-1, n}),
            z = mk.act(0, {-1, n});
    mk.b(0).step(OpKind::RmsNorm, {x, nw}, {xn}, {}, {1e-5f});
    mk.b(0).step(OpKind::Copy, {xn}, {xh}, {}, {}, "to host", where);
    mk.b(0).step(OpKind::Matmul, {xh, w}, {yh}, {}, {}, "host matmul", where);
    mk.b(0).step(OpKind::Copy, {yh}, {y}, {}, {}, "to device");
    mk.b(0).step(OpKind::RmsNorm, {y}, {z}, {}, {1e-5f});
    return std::array<int32_t, 2>{yh, z};
  };
  PlanMaker mk(1, 4, 8), dev(1, 4, 8); // 8 token ids: the calls use ids 0..3
  auto [yh, z] = build(Placement::Host, mk);
  build(Placement::Device, dev);
  for (auto calls : {std::vector<std::pair<int32_t, int32_t>>{{0, 1}, {1, 1}}, {{0, 4}}}) {
    Pair p = runBoth(mk, calls);
    ASSERT_TRUE(p.gpu);
    const int64_t t = calls.back().second;
    EXPECT_EQ(p.cpu->tensorData(0, yh, t), p.gpu->tensorData(0, yh, t)) << "host matmul at " << t << " tokens";
    expectClose(p, 0, z, t, 1e-5, "device norm of the copied-back rows");
  }
  Pair p = runBoth(mk, {{0, 1}}), q = runBoth(dev, {{0, 1}});
  ASSERT_TRUE(p.gpu && q.gpu);
  EXPECT_GE(q.gpu->deviceBytes()[0], p.gpu->deviceBytes()[0] + *ggmlRowBytes(GGMLType::Q4_K, k) * n)
      << "the host slice must stay in host memory";
}

} // namespace
