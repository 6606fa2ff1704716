//===- PlacementTest.cpp - host placement on the CPU backend and its HostStepRunner ----===//
//
// Host placement changes no result on the CPU session (all of it is host memory; the host activations get
// their own arena, as the plan sizes it): a plan whose matmul runs on the host between two copies gives the
// all-device result. The pieces another backend uses for its host steps work on their own:
// resolveTensors puts host activations (and their views) at StorageBases::hostActs, bindOperands binds a
// host step there, and the HostStepRunner the CPU Backend object hands out runs it, refusing collectives
// with an error. A misplaced plan fails at open with one line naming the step and the tensor.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/backends/Backends.h"
#include "runtime/exec/Binding.h"
#include "runtime/exec/StepChecks.h"
#include "runtime/ggml/Quant.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(Placement, HostStepsRunOnTheCpuBackendLikeDeviceSteps) {
  PlanMaker m(1, 3, 5); // token ids 0..2 index the 5-row table
  auto table = randomFloats(5 * 16, 11), wv = randomFloats(7 * 16, 12);
  const int32_t x = m.tokenInput(0, {16}, table);
  // Device path: y = x . wᵀ.
  const int32_t w = m.weightF32(0, {7, 16}, wv), y = m.act(0, {-1, 7});
  m.b(0).step(OpKind::Matmul, {x, w}, {y});
  // Host path: the same matmul on the host, on a host slice of the same weight, between two copies.
  const int32_t wh = m.weightF32(0, {7, 16}, wv);
  DevicePlan &dev = m.plan.devices[0];
  dev.weights[dev.tensors[wh].index].placement = Placement::Host;
  const int32_t h = m.hostAct(0, {-1, 16}), yh = m.hostAct(0, {-1, 7}), back = m.act(0, {-1, 7});
  // Each arena has its own offsets: the host tensors start at 0 like the device's first.
  EXPECT_EQ(dev.tensors[h].offset, 0u);
  EXPECT_EQ(dev.hostActivationBytes, 192u + 128u); // [3,16] and [3,7] f32, 64-byte aligned
  m.b(0).step(OpKind::Copy, {x}, {h}, {}, {}, "to_host", Placement::Host);
  m.b(0).step(OpKind::Matmul, {h, wh}, {yh}, {}, {}, "host_matmul", Placement::Host);
  m.b(0).step(OpKind::Copy, {yh}, {back}, {}, {}, "to_device", Placement::Device);
  m.plan.ggufSize = m.gguf.size();
  ASSERT_TRUE(validatePlan(m.plan).empty()) << validatePlan(m.plan)[0];
  auto s = m.run(3);
  ASSERT_TRUE(s);
  const std::vector<float> want = s->tensorData(0, y, 3), got = s->tensorData(0, back, 3);
  ASSERT_EQ(want.size(), 21u);
  EXPECT_EQ(got, want);
  EXPECT_NE(want, std::vector<float>(21, 0.0f));
}

TEST(Placement, HostStepRunnerRunsAHostStepOnBoundHostTensors) {
  // One device: a device activation a, a host copy h of it (and a view of h), a host weight w [2,3] and a
  // host matmul into y; plus an all-reduce on the device.
  Plan p;
  p.model = {"test", 4, 64, 2, 64};
  p.ggufSize = 1024;
  p.devices.resize(1);
  DevicePlan &dev = p.devices[0];
  DevicePlanBuilder b(dev);
  WeightSlice ws{"w", GGMLType::F32, {2, 3}, 0, 24, {{0, 12, 12, 2}}, Placement::Host};
  const int32_t w = b.weight(b.addWeight(ws));
  const int32_t a = b.activation(DType::F32, {-1, 3}, 0);
  const int32_t h = b.activation(DType::F32, {-1, 3}, 64, Placement::Host);
  const int32_t hv = b.view(h, DType::F32, {-1, 3});
  const int32_t y = b.activation(DType::F32, {-1, 2}, 128, Placement::Host);
  dev.hostActivationBytes = 192;
  b.step(OpKind::Copy, {a}, {h}, {}, {}, "to_host", Placement::Host);
  b.step(OpKind::Matmul, {hv, w}, {y}, {}, {}, "host_matmul", Placement::Host);
  b.step(OpKind::AllReduce, {a}, {a}, {}, {}, "all_reduce");
  dev.weightBytes = 64;
  dev.activationBytes = 64;
  ASSERT_TRUE(validatePlan(p).empty()) << validatePlan(p)[0];
  EXPECT_EQ(dev.tensors[hv].placement, Placement::Host);

  // Two separate arenas, as every backend has them (here both are host memory).
  std::vector<float> deviceArena(48, 0), hostArena(48, -1), weights = {1, 2, 3, -1, 0, 2};
  exec::StorageBases bases;
  bases.acts = reinterpret_cast<uint8_t *>(deviceArena.data());
  bases.hostActs = reinterpret_cast<uint8_t *>(hostArena.data());
  bases.weights = {reinterpret_cast<uint8_t *>(weights.data())};
  std::vector<exec::KvBuffers> kv;
  std::vector<void *> ptrs = exec::resolveTensors(dev, bases);
  EXPECT_EQ(ptrs[a], deviceArena.data());
  EXPECT_EQ(ptrs[h], hostArena.data() + 16);
  EXPECT_EQ(ptrs[hv], hostArena.data() + 16);
  EXPECT_EQ(ptrs[y], hostArena.data() + 32);
  EXPECT_EQ(ptrs[w], weights.data());

  const float x[6] = {1, 0, 2, -3, 1, 1};
  std::copy(x, x + 6, deviceArena.begin());
  // What a GPU backend does: ask the CPU Backend object for a runner, never a CPU header.
  const Backend *cpu = builtinBackends().find("cpu");
  ASSERT_NE(cpu, nullptr);
  std::unique_ptr<exec::HostStepRunner> host = cpu->hostStepRunner(2);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->threads(), 2);
  std::vector<exec::TensorRef> in, out;
  for (size_t si = 0; si < 2; ++si) {
    const Step &s = dev.steps[si];
    exec::bindOperands(dev, ptrs, s, 2, 2, in, out);
    EXPECT_EQ(exec::checkStep(s, in, out, dev.kv), "") << s.name;
    Expected<void> ok = host->run(s, in, out, kv);
    EXPECT_TRUE(ok) << ok.message();
  }
  EXPECT_EQ(std::vector<float>(hostArena.begin() + 16, hostArena.begin() + 22), std::vector<float>(x, x + 6));
  // y[t, n] = x[t, :] . w[n, :]
  const std::vector<float> want = {1 + 0 + 6, -1 + 0 + 4, -3 + 2 + 3, 3 + 0 + 2};
  EXPECT_EQ(std::vector<float>(hostArena.begin() + 32, hostArena.begin() + 36), want);

  // Collectives are the session's: the runner refuses them with an error naming the step, and leaves the
  // operands alone.
  exec::bindOperands(dev, ptrs, dev.steps[2], 2, 2, in, out);
  const std::vector<float> before = deviceArena;
  Expected<void> refused = host->run(dev.steps[2], in, out, kv);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("'all_reduce' (all_reduce) is a collective"), std::string::npos)
      << refused.message();
  EXPECT_EQ(deviceArena, before);
}

TEST(Placement, HostStepRunnerGivesTheSessionsBits) {
  // A Q4_K matmul (8-bit activations, integer dots: what a GPU's own kernels would round differently),
  // run by the CPU session, then alone by a runner of another thread count on copies of its operands.
  const int64_t k = 256, n = 9, t = 3;
  PlanMaker m(1, t, 4);
  const std::vector<float> wf = randomFloats(n * k, 21);
  std::vector<uint8_t> wq(n * *ggmlRowBytes(GGMLType::Q4_K, k));
  for (int64_t r = 0; r < n; ++r)
    quantizeRow(GGMLType::Q4_K, &wf[r * k], wq.data() + r * *ggmlRowBytes(GGMLType::Q4_K, k), k);
  const int32_t x = m.tokenInput(0, {k}, randomFloats(4 * k, 22));
  const int32_t w = m.weightRaw(0, GGMLType::Q4_K, {n, k}, wq), y = m.act(0, {-1, n});
  m.b(0).step(OpKind::Matmul, {x, w}, {y});
  auto s = m.run(t);
  ASSERT_TRUE(s);
  const std::vector<float> want = s->tensorData(0, y, t);
  ASSERT_EQ(want.size(), size_t(t * n));

  std::vector<float> xs = s->tensorData(0, x, t), ys(t * n, -1.0f);
  exec::TensorRef xr{xs.data(), DType::F32, false, GGMLType::F32, {t, k}};
  exec::TensorRef wr{wq.data(), DType::F32, true, GGMLType::Q4_K, {n, k}};
  exec::TensorRef yr{ys.data(), DType::F32, false, GGMLType::F32, {t, n}};
  std::vector<exec::KvBuffers> kv;
  std::unique_ptr<exec::HostStepRunner> host = builtinBackends().find("cpu")->hostStepRunner(3);
  Expected<void> ok = host->run(m.plan.devices[0].steps.back(), {xr, wr}, {yr}, kv);
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_EQ(ys, want);
}

TEST(Placement, MisplacedStepFailsAtOpenNamingStepAndTensor) {
  PlanMaker m(1, 2, 1);
  const int32_t x = m.tokenInput(0, {4}, randomFloats(3 * 4, 13));
  const int32_t y = m.act(0, {-1, 4});
  m.b(0).step(OpKind::Scale, {x}, {y}, {}, {2.0f}, "host_scale", Placement::Host);
  SessionOptions o = m.options();
  auto s = Session::open(m.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(
      s.message().find("step 1 'host_scale' (scale) on the host: input tensor 5 (view) is on the device"),
      std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

} // namespace
