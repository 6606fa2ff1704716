//===- CollectiveRunnerTest.cpp - collective steps from a communicator and kernels ===//
//
// CollectiveRunner with scalar kernels written here and the in-process communicator, no backend: the
// AllReduceRmsNorm composition (residual added once, on device 0; the sum; a norm on every device) run the
// way a GPU backend calls it, one call for every device, in the order adds, one sum, norms; an all-reduce
// bucket whose outputs are not its inputs; an all-gather whose unequal part sizes the runner takes from
// the plan while each device calls from its own thread; and calls that are not at one collective failing
// with the communicator aborted, so no peer waits.
//===----------------------------------------------------------------------===//
#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/exec/Binding.h"
#include "runtime/exec/Collectives.h"
#include "runtime/plan/StepParams.h"

#include "test/runtime/exec/ExecTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// Scalar kernels that log what they were asked to do.
class ScalarKernels final : public exec::CollectiveKernels {
public:
  void copy(int rank, const exec::TensorRef &x, const exec::TensorRef &y) override {
    log.push_back("copy " + std::to_string(rank));
    std::memmove(y.data, x.data, x.numel() * 4);
  }
  void add(int rank, const exec::TensorRef &a, const exec::TensorRef &b, const exec::TensorRef &y) override {
    log.push_back("add " + std::to_string(rank));
    for (int64_t i = 0; i < a.numel(); ++i)
      y.f()[i] = a.f()[i] + b.f()[i];
  }
  void rmsNorm(int rank, const exec::TensorRef &x, const exec::TensorRef *w, const exec::TensorRef &y,
               float eps) override {
    log.push_back("norm " + std::to_string(rank));
    for (int64_t r = 0; r < x.rows(); ++r) {
      const int64_t n = x.inner();
      double ss = 0;
      for (int64_t i = 0; i < n; ++i)
        ss += double(x.f()[r * n + i]) * x.f()[r * n + i];
      const float scale = float(1.0 / std::sqrt(ss / n + eps));
      for (int64_t i = 0; i < n; ++i)
        y.f()[r * n + i] = x.f()[r * n + i] * scale * (w ? w->f()[i] : 1.0f);
    }
  }
  std::vector<std::string> log;
};

/// One device's memory for a PlanMaker plan: its activation arena and resolved tensor addresses.
struct DeviceMemory {
  std::vector<float> arena;
  std::vector<void *> ptrs;
  DeviceMemory(PlanMaker &mk, int d) : arena(mk.used[d] / 4 + 16, 0.0f) {
    exec::StorageBases b;
    b.acts = reinterpret_cast<uint8_t *>(arena.data());
    ptrs = exec::resolveTensors(mk.plan.devices[d], b);
  }
  float *at(int32_t id) { return static_cast<float *>(ptrs[id]); }
};

TEST(CollectiveRunner, AllReduceRmsNormAsOneGroupCall) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE("devices " + std::to_string(n));
    const int64_t rows = 2, cols = 8;
    const float eps = 1e-6f;
    PlanMaker mk(n);
    std::vector<int32_t> x(n), r(n), w(n), y(n), nrm(n);
    for (int d = 0; d < n; ++d) {
      x[d] = mk.act(d, {rows, cols});
      r[d] = mk.act(d, {rows, cols});
      w[d] = mk.act(d, {cols});
      y[d] = r[d]; // the sum lands in the residual's bytes, as the emitter allows
      nrm[d] = mk.act(d, {rows, cols});
      const PackedParams p = AllReduceRmsNormParams{true, true, eps}.pack();
      mk.b(d).step(OpKind::AllReduceRmsNorm, {x[d], r[d], w[d]}, {y[d], nrm[d]}, p.ints, p.floats,
                   "layer_end");
    }
    std::vector<DeviceMemory> mem;
    std::vector<std::vector<float>> xs(n), rs(n);
    const std::vector<float> wv = randomFloats(cols, 99, 0.5f, 1.5f);
    for (int d = 0; d < n; ++d) {
      mem.emplace_back(mk, d);
      xs[d] = randomFloats(rows * cols, 10 + d);
      rs[d] = randomFloats(rows * cols, 20 + d);
      std::copy(xs[d].begin(), xs[d].end(), mem[d].at(x[d]));
      std::copy(rs[d].begin(), rs[d].end(), mem[d].at(r[d]));
      std::copy(wv.begin(), wv.end(), mem[d].at(w[d]));
    }
    comm::InProcessCommunicator comm(n);
    ScalarKernels kernels;
    exec::CollectiveRunner runner(mk.plan, comm, kernels);
    std::vector<std::vector<exec::TensorRef>> in(n), out(n);
    std::vector<exec::CollectiveCall> calls;
    for (int d = 0; d < n; ++d) {
      const DevicePlan &dp = mk.plan.devices[d];
      const size_t step = dp.steps.size() - 1;
      exec::bindOperands(dp, mem[d].ptrs, dp.steps[step], rows, rows, in[d], out[d]);
      calls.push_back({d, step, &in[d], &out[d], nullptr});
    }
    Expected<void> ok = runner.run(calls, rows, rows);
    ASSERT_TRUE(ok) << ok.message();
    // Adds and copies for every device, one sum, then every norm.
    std::vector<std::string> want = {"add 0"};
    for (int d = 1; d < n; ++d)
      want.push_back("copy " + std::to_string(d));
    for (int d = 0; d < n; ++d)
      want.push_back("norm " + std::to_string(d));
    EXPECT_EQ(kernels.log, want);
    for (int d = 0; d < n; ++d)
      for (int64_t row = 0; row < rows; ++row) {
        std::vector<float> sum(cols);
        double ss = 0;
        for (int64_t i = 0; i < cols; ++i) {
          float v = xs[0][row * cols + i] + rs[0][row * cols + i]; // the residual, once
          for (int e = 1; e < n; ++e)
            v += xs[e][row * cols + i];
          sum[i] = v;
          ss += double(v) * v;
        }
        for (int64_t i = 0; i < cols; ++i) {
          ASSERT_EQ(mem[d].at(y[d])[row * cols + i], sum[i]) << "device " << d;
          const float normed = sum[i] * float(1.0 / std::sqrt(ss / cols + eps)) * wv[i];
          ASSERT_NEAR(mem[d].at(nrm[d])[row * cols + i], normed, 1e-6f) << "device " << d;
        }
      }
  }
}

TEST(CollectiveRunner, AllReduceCopiesInputsToOutputsThenSums) {
  PlanMaker mk(2);
  std::vector<int32_t> a(2), b(2);
  for (int d = 0; d < 2; ++d) {
    a[d] = mk.act(d, {5});
    b[d] = mk.act(d, {5});
    mk.b(d).step(OpKind::AllReduce, {a[d]}, {b[d]}, {}, {}, "sum");
  }
  std::vector<DeviceMemory> mem;
  for (int d = 0; d < 2; ++d) {
    mem.emplace_back(mk, d);
    for (int i = 0; i < 5; ++i)
      mem[d].at(a[d])[i] = float(10 * d + i);
  }
  comm::InProcessCommunicator comm(2);
  ScalarKernels kernels;
  exec::CollectiveRunner runner(mk.plan, comm, kernels);
  std::vector<std::vector<exec::TensorRef>> in(2), out(2);
  std::vector<exec::CollectiveCall> calls;
  for (int d = 0; d < 2; ++d) {
    const DevicePlan &dp = mk.plan.devices[d];
    exec::bindOperands(dp, mem[d].ptrs, dp.steps.back(), 1, 1, in[d], out[d]);
    calls.push_back({d, dp.steps.size() - 1, &in[d], &out[d], nullptr});
  }
  ASSERT_TRUE(runner.run(calls, 1, 1));
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(mem[d].at(b[d])[i], float(10 + 2 * i)) << "device " << d;
      EXPECT_EQ(mem[d].at(a[d])[i], float(10 * d + i)) << "the input changed on device " << d;
    }
}

TEST(CollectiveRunner, AllGatherTakesThePeersPartsFromThePlan) {
  // [2, parts, 3] with parts 2, 0, 1: every device calls from its own thread with only its own operands.
  const std::vector<int64_t> parts = {2, 0, 1};
  PlanMaker mk(3);
  std::vector<int32_t> x(3), y(3);
  for (int d = 0; d < 3; ++d) {
    x[d] = mk.act(d, {2, parts[d], 3});
    y[d] = mk.act(d, {2, 3, 3});
    mk.b(d).step(OpKind::AllGather, {x[d]}, {y[d]}, AxisParams{1}.pack().ints, {}, "gather");
  }
  std::vector<DeviceMemory> mem;
  for (int d = 0; d < 3; ++d) {
    mem.emplace_back(mk, d);
    for (int64_t i = 0; i < 2 * parts[d] * 3; ++i)
      mem[d].at(x[d])[i] = float(100 * d + i);
  }
  comm::InProcessCommunicator comm(3);
  ScalarKernels kernels;
  exec::CollectiveRunner runner(mk.plan, comm, kernels);
  std::vector<Expected<void>> res(3);
  std::vector<std::thread> threads;
  for (int d = 0; d < 3; ++d)
    threads.emplace_back([&, d] {
      const DevicePlan &dp = mk.plan.devices[d];
      std::vector<exec::TensorRef> in, out;
      exec::bindOperands(dp, mem[d].ptrs, dp.steps.back(), 1, 1, in, out);
      res[d] = runner.run({{d, dp.steps.size() - 1, &in, &out, nullptr}}, 1, 1);
    });
  for (std::thread &t : threads)
    t.join();
  for (int d = 0; d < 3; ++d) {
    ASSERT_TRUE(res[d]) << res[d].message();
    const float *g = mem[d].at(y[d]);
    // Row o: device 0's two slots, then device 2's one.
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(g[(o * 3 + 0) * 3 + c], float(0 + (o * 2 + 0) * 3 + c));
        EXPECT_EQ(g[(o * 3 + 1) * 3 + c], float(0 + (o * 2 + 1) * 3 + c));
        EXPECT_EQ(g[(o * 3 + 2) * 3 + c], float(200 + o * 3 + c));
      }
  }
}

TEST(CollectiveRunner, CallsAtDifferentCollectivesFailAndAbort) {
  PlanMaker mk(2);
  for (int d = 0; d < 2; ++d) {
    const int32_t a = mk.act(d, {4});
    mk.b(d).step(OpKind::AllReduce, {a}, {a}, {}, {}, "first");
    mk.b(d).step(OpKind::AllReduce, {a}, {a}, {}, {}, "second");
  }
  std::vector<DeviceMemory> mem;
  for (int d = 0; d < 2; ++d)
    mem.emplace_back(mk, d);
  comm::InProcessCommunicator comm(2);
  ScalarKernels kernels;
  exec::CollectiveRunner runner(mk.plan, comm, kernels);
  std::vector<std::vector<exec::TensorRef>> in(2), out(2);
  const size_t first = mk.plan.devices[0].steps.size() - 2;
  exec::bindOperands(mk.plan.devices[0], mem[0].ptrs, mk.plan.devices[0].steps[first], 1, 1, in[0], out[0]);
  exec::bindOperands(mk.plan.devices[1], mem[1].ptrs, mk.plan.devices[1].steps[first + 1], 1, 1, in[1], out[1]);
  Expected<void> ok =
      runner.run({{0, first, &in[0], &out[0], nullptr}, {1, first + 1, &in[1], &out[1], nullptr}}, 1, 1);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.message().find("device 1 is at step"), std::string::npos) << ok.message();
  EXPECT_NE(ok.message().find("'second', not at collective 0"), std::string::npos) << ok.message();
  EXPECT_TRUE(comm.aborted());
}

} // namespace
