//===- ReplicaSharesTest.cpp - work the devices of one session share ----------===//
//
// ReplicaShares and SharedReduceNorm: the CPU session's devices in one process split work the plan gives
// each of them whole (replicated matmuls) or compose from several passes (AllReduceRmsNorm).
//
// A matmul the plan marks replicated (MatmulParams: every device computes it from a whole weight) is
// split by weight rows among the devices of one session from kShareMinTokens tokens on and gathered. These
// tests check the row shares, that a shared product gives the logits of the unshared one bit for bit
// (2 and 3 devices, a q8_0 weight whose rows end in a partial panel), and that the gathers happen exactly
// where they should: once per device and shared matmul at a prompt, never at a decode step or for a weight
// too small to give every device a panel.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/cpu/ReplicaShares.h"
#include "runtime/cpu/SharedReduceNorm.h"
#include "runtime/ggml/Quant.h"
#include "runtime/plan/StepParams.h"

#include <atomic>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(ReplicaShares, RowsAreWholePanelsCoveringTheWeightOnce) {
  using cpu::ReplicaShares;
  EXPECT_EQ(ReplicaShares::rowsOf(256, 0, 2), (std::pair<int64_t, int64_t>{0, 128}));
  EXPECT_EQ(ReplicaShares::rowsOf(256, 1, 2), (std::pair<int64_t, int64_t>{128, 256}));
  // 8 panels over 3 devices: 3, 3, 2.
  EXPECT_EQ(ReplicaShares::rowsOf(256, 0, 3), (std::pair<int64_t, int64_t>{0, 96}));
  EXPECT_EQ(ReplicaShares::rowsOf(256, 1, 3), (std::pair<int64_t, int64_t>{96, 192}));
  EXPECT_EQ(ReplicaShares::rowsOf(256, 2, 3), (std::pair<int64_t, int64_t>{192, 256}));
  // A partial last panel stays with its device.
  EXPECT_EQ(ReplicaShares::rowsOf(100, 1, 2), (std::pair<int64_t, int64_t>{64, 100}));
  for (int64_t n : {32, 33, 100, 257, 1000})
    for (int devices = 1; devices <= 5; ++devices) {
      int64_t at = 0;
      for (int d = 0; d < devices; ++d) {
        auto [r0, r1] = ReplicaShares::rowsOf(n, d, devices);
        EXPECT_EQ(r0, at) << n << " rows, device " << d << " of " << devices;
        EXPECT_LE(r0, r1);
        EXPECT_TRUE(r0 % 32 == 0 || r0 == n);
        at = r1;
      }
      EXPECT_EQ(at, n) << n << " rows over " << devices;
    }
}

/// An in-process communicator that counts the all-gathers each rank makes.
class CountingComm final : public comm::Communicator {
public:
  explicit CountingComm(int n) : inner_(n) {}
  const char *name() const override { return inner_.name(); }
  int size() const override { return inner_.size(); }
  std::vector<int> localRanks() const override { return inner_.localRanks(); }
  bool streamOrdered() const override { return false; }
  bool supportsPayload(comm::Payload p) const override { return inner_.supportsPayload(p); }
  Expected<void> allReduce(const std::vector<comm::AllReduceEntry> &l, comm::ElemType t) override {
    inner_.setPayload(payload_); // the session set this wrapper's
    return inner_.allReduce(l, t);
  }
  bool wholeOptional() const override { return inner_.wholeOptional(); }
  Expected<void> allGather(const std::vector<comm::AllGatherEntry> &l, const comm::AxisParts &p,
                           comm::ElemType t) override {
    gathers += static_cast<int>(l.size());
    for (const comm::AllGatherEntry &e : l)
      nullWholes += e.whole.data ? 0 : 1;
    return inner_.allGather(l, p, t);
  }
  Expected<void> reduceScatter(const std::vector<comm::ReduceScatterEntry> &l, const comm::AxisParts &p,
                               comm::ElemType t) override {
    return inner_.reduceScatter(l, p, t);
  }
  Expected<void> broadcast(const std::vector<comm::BroadcastEntry> &l, int root, comm::ElemType t) override {
    return inner_.broadcast(l, root, t);
  }
  Expected<void> barrier(const std::vector<int> &ranks) override {
    barriers += static_cast<int>(ranks.size());
    return inner_.barrier(ranks);
  }
  void abort(const std::string &reason) override { inner_.abort(reason); }
  bool aborted() const override { return inner_.aborted(); }
  std::atomic<int> gathers{0}, barriers{0}, nullWholes{0};

private:
  comm::InProcessCommunicator inner_;
};

constexpr int64_t kK = 64, kTable = 40;

/// logits = W · emb[tok] on every device from the same whole q8_0 W [n, 64] (the replicated product),
/// device 0 returning them; `replicated` says so in the plan.
PlanMaker replicatedPlan(int devices, int64_t n, bool replicated) {
  const std::vector<float> emb = randomFloats(kTable * kK, 7), w = randomFloats(n * kK, 8);
  const uint64_t rowBytes = *ggmlRowBytes(GGMLType::Q8_0, kK);
  std::vector<uint8_t> q(static_cast<size_t>(n * rowBytes));
  for (int64_t r = 0; r < n; ++r)
    quantizeRow(GGMLType::Q8_0, w.data() + r * kK, q.data() + r * rowBytes, kK);
  PlanMaker mk(devices, 24, n);
  const uint64_t at = mk.addBytes(q.data(), q.size());
  for (int d = 0; d < devices; ++d) {
    const int32_t x = mk.tokenInput(d, {kK}, emb);
    const int32_t wd = mk.weightPieces(d, GGMLType::Q8_0, {n, kK}, {{at, rowBytes, rowBytes, uint64_t(n)}});
    const int32_t y = mk.act(d, {-1, n});
    mk.b(d).step(OpKind::Matmul, {x, wd}, {y}, MatmulParams{replicated}.pack().ints, {}, "k_proj");
    if (d == 0)
      mk.b(d).step(OpKind::Copy, {y}, {mk.logits[0]}, {}, {}, "logits");
  }
  return mk;
}

/// Logits of a 20-token prompt and then one decode token; the gathers counted after each.
struct Outcome {
  std::vector<float> prompt, decode;
  int gathersAfterPrompt = 0, gathersAfterDecode = 0;
};

Outcome runPlan(PlanMaker &mk, int devices) {
  auto comm = std::make_shared<CountingComm>(devices);
  SessionOptions o = mk.options(devices, 32);
  o.comm = comm;
  Outcome r;
  auto s = Session::open(mk.plan, o);
  EXPECT_TRUE(s) << (s ? "" : s.message());
  if (!s)
    return r;
  std::vector<int32_t> ids, pos;
  for (int32_t i = 0; i < 20; ++i) {
    ids.push_back((i * 7) % kTable);
    pos.push_back(i);
  }
  auto a = (*s)->evaluate(ids, pos);
  EXPECT_TRUE(a) << (a ? "" : a.message());
  r.gathersAfterPrompt = comm->gathers.load();
  auto b = (*s)->evaluate({3}, {20});
  EXPECT_TRUE(b) << (b ? "" : b.message());
  r.gathersAfterDecode = comm->gathers.load();
  if (a && b) {
    r.prompt = *a;
    r.decode = *b;
  }
  return r;
}

TEST(ReplicaShares, SharedProductsGiveTheWholeProductsLogitsBitForBit) {
  for (int devices : {2, 3}) {
    SCOPED_TRACE(devices);
    PlanMaker shared = replicatedPlan(devices, 100, true), whole = replicatedPlan(devices, 100, false);
    const Outcome a = runPlan(shared, devices), b = runPlan(whole, devices);
    ASSERT_EQ(a.prompt.size(), 20u * 100u);
    ASSERT_EQ(a.decode.size(), 100u);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.decode, b.decode);
    EXPECT_EQ(a.gathersAfterPrompt, devices); // one gather per device at the prompt
    EXPECT_EQ(a.gathersAfterDecode, devices); // none at a 1-token step
    EXPECT_EQ(b.gathersAfterDecode, 0);
    // The logits are the product (against the dequantized weight, within f32 rounding of the q8 input).
    EXPECT_GT(maxAbsDiff(a.prompt, std::vector<float>(a.prompt.size(), 0.0f)), 1.0f);
  }
}

TEST(ReplicaShares, AWeightWithFewerPanelsThanDevicesIsNotShared) {
  PlanMaker shared = replicatedPlan(3, 80, true), whole = replicatedPlan(3, 80, false); // 3 panels, 3 devices
  PlanMaker tiny = replicatedPlan(3, 40, true);                                          // 2 panels
  const Outcome a = runPlan(shared, 3), b = runPlan(whole, 3), c = runPlan(tiny, 3);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.gathersAfterPrompt, 3);
  EXPECT_EQ(c.gathersAfterPrompt, 0);
  EXPECT_EQ(c.prompt.size(), 20u * 40u);
}

// ---- SharedReduceNorm -----------------------------------------------------------------------------

TEST(SharedReduceNorm, OperandsOverlappingOtherThanExactlyAreRefused) {
  std::vector<float> mem(4 * 64);
  auto t = [&](size_t at, int64_t rows) {
    exec::TensorRef r;
    r.data = mem.data() + at;
    r.shape = {rows, 16};
    return r;
  };
  const AllReduceRmsNormParams p{true, false, 1e-6f};
  // x, r, y, n apart; y over r exactly (the plan reuses the residual's bytes); n over x exactly.
  EXPECT_TRUE(cpu::SharedReduceNorm::operandsSafe({t(0, 2), t(32, 2)}, {t(64, 2), t(96, 2)}, p));
  EXPECT_TRUE(cpu::SharedReduceNorm::operandsSafe({t(0, 2), t(32, 2)}, {t(32, 2), t(0, 2)}, p));
  // y half over x (another owner's rows would be overwritten before they are read), y over n.
  EXPECT_FALSE(cpu::SharedReduceNorm::operandsSafe({t(0, 2), t(64, 2)}, {t(16, 2), t(128, 2)}, p));
  EXPECT_FALSE(cpu::SharedReduceNorm::operandsSafe({t(0, 2), t(32, 2)}, {t(64, 2), t(64, 2)}, p));
  EXPECT_FALSE(cpu::SharedReduceNorm::operandsSafe({t(0, 2), t(64, 2)}, {t(96, 2), t(72, 2)}, p));
}

constexpr int64_t kN = 48;

/// Per device d: x_d = emb_d[tok] (a different addend on each device), then AllReduceRmsNorm with the
/// embedding row as the residual and a norm weight: y = Σ x_d + emb[tok], n = rms_norm(y) * w; device 0
/// returns [y | n].
PlanMaker reduceNormPlan(int devices) {
  const std::vector<float> emb = randomFloats(kTable * kN, 11), w = randomFloats(kN, 12);
  PlanMaker mk(devices, 24, 2 * kN);
  for (int d = 0; d < devices; ++d) {
    // Lookups, not products: a row's bits then do not depend on the call's token count (a batched
    // matmul's may), so the two paths of the reduce are all that can differ.
    const int32_t h = mk.tokenInput(d, {kN}, emb), x = mk.tokenInput(d, {kN}, randomFloats(kTable * kN, 20 + d));
    const int32_t nw = mk.weightF32(d, {kN}, w);
    const int32_t y = mk.act(d, {-1, kN}), n = mk.act(d, {-1, kN});
    const PackedParams pp = AllReduceRmsNormParams{true, true, 1e-6f}.pack();
    mk.b(d).step(OpKind::AllReduceRmsNorm, {x, h, nw}, {y, n}, pp.ints, pp.floats, "reduce_norm");
    if (d == 0)
      mk.b(d).step(OpKind::Concat, {y, n}, {mk.logits[0]}, AxisParams{1}.pack().ints, {}, "out");
  }
  return mk;
}

// With bf16 all-reduce payloads too (--comm-dtype bf16): the shared path's rows are the composition's
// (the communicator's bf16 sum, then the residual), and not the f32 payloads' bits.
TEST(SharedReduceNorm, APromptGivesTheTokenByTokenBitsWithTwoBarriersPerDevice) {
  std::vector<float> f32Whole;
  for (CommDtype wire : {CommDtype::F32, CommDtype::BF16})
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::string(commDtypeName(wire)) + " devices " + std::to_string(devices));
    PlanMaker mk = reduceNormPlan(devices);
    std::vector<int32_t> ids, pos;
    for (int32_t i = 0; i < 20; ++i) {
      ids.push_back((i * 11) % kTable);
      pos.push_back(i);
    }
    auto comm = std::make_shared<CountingComm>(devices);
    SessionOptions o = mk.options(devices, 32);
    o.comm = comm;
    o.commDtype = wire;
    auto s = Session::open(mk.plan, o);
    ASSERT_TRUE(s) << s.message();
    auto whole = (*s)->evaluate(ids, pos);
    ASSERT_TRUE(whole) << whole.message();
    EXPECT_EQ(comm->barriers.load(), 2 * devices); // the shared path: ready, written
    std::vector<float> oneByOne;
    for (size_t i = 0; i < ids.size(); ++i) { // 1 row per call: the communicator's composition
      auto r = (*s)->evaluate({ids[i]}, {pos[i]});
      ASSERT_TRUE(r) << r.message();
      oneByOne.insert(oneByOne.end(), r->begin(), r->end());
    }
    EXPECT_EQ(comm->barriers.load(), 2 * devices);
    ASSERT_EQ(whole->size(), 20u * 2 * kN);
    EXPECT_EQ(*whole, oneByOne);
    if (devices == 2 && wire == CommDtype::F32)
      f32Whole = *whole;
    if (devices == 2 && wire == CommDtype::BF16)
      EXPECT_NE(*whole, f32Whole) << "bf16 payloads changed nothing";
    // n is the norm of y: a row of n has mean square ~ |w|^2 / N, not the raw sum's.
    double ms = 0;
    for (int64_t j = 0; j < kN; ++j)
      ms += double((*whole)[kN + j]) * (*whole)[kN + j];
    EXPECT_GT(ms, 0.0);
  }
}

// Two reduces in a row, the second taking the first's sum as its residual (a layer's attention and FFN
// blocks): every device then needs only its own rows of the first sum, and the peers write the norm's rows
// alone into it (ownRowsSuffice). Device 0 returns the second reduce's [y | n]; with `readSum`, device 0
// also reads the first sum whole (a Copy into an activation), which keeps it whole everywhere it is read.
PlanMaker chainedReducePlan(int devices, bool readSum) {
  const std::vector<float> emb = randomFloats(kTable * kN, 41), w = randomFloats(kN, 42);
  PlanMaker mk(devices, 24, 2 * kN);
  for (int d = 0; d < devices; ++d) {
    const int32_t h = mk.tokenInput(d, {kN}, emb);
    const int32_t x1 = mk.tokenInput(d, {kN}, randomFloats(kTable * kN, 50 + d));
    const int32_t x2 = mk.tokenInput(d, {kN}, randomFloats(kTable * kN, 60 + d));
    const int32_t nw = mk.weightF32(d, {kN}, w);
    const int32_t y1 = mk.act(d, {-1, kN}), n1 = mk.act(d, {-1, kN}), y2 = mk.act(d, {-1, kN}),
                  n2 = mk.act(d, {-1, kN});
    const PackedParams pp = AllReduceRmsNormParams{true, true, 1e-6f}.pack();
    mk.b(d).step(OpKind::AllReduceRmsNorm, {x1, h, nw}, {y1, n1}, pp.ints, pp.floats, "attn_reduce");
    mk.b(d).step(OpKind::AllReduceRmsNorm, {x2, y1, nw}, {y2, n2}, pp.ints, pp.floats, "ffn_reduce");
    if (d == 0 && readSum) { // y2 + y1 whole: [y2 | y1] stands in for a reader of every row of y1
      mk.b(d).step(OpKind::Concat, {y2, y1}, {mk.logits[0]}, AxisParams{1}.pack().ints, {}, "out");
    } else if (d == 0) {
      mk.b(d).step(OpKind::Concat, {y2, n2}, {mk.logits[0]}, AxisParams{1}.pack().ints, {}, "out");
    }
  }
  return mk;
}

TEST(SharedReduceNorm, ASumReadOnlyAsTheNextResidualIsWrittenInItsOwnersRows) {
  auto step = [](OpKind op, std::vector<int32_t> in, std::vector<int32_t> out) {
    Step s;
    s.op = op;
    s.inputs = std::move(in);
    s.outputs = std::move(out);
    const PackedParams pp = AllReduceRmsNormParams{true, true, 1e-6f}.pack();
    if (op == OpKind::AllReduceRmsNorm)
      s.ints = pp.ints, s.floats = pp.floats;
    return s;
  };
  DevicePlan dp;
  // 0..2: addends, 3: residual, 4: weight, 5/6: sum, norm, 7/8: sum, norm, 9/10: sum, norm.
  dp.steps = {step(OpKind::AllReduceRmsNorm, {0, 3, 4}, {5, 6}), step(OpKind::AllReduceRmsNorm, {1, 5, 4}, {7, 8}),
              step(OpKind::AllReduceRmsNorm, {2, 7, 4}, {9, 10})};
  const std::vector<char> all(3, 1);
  // The last sum nobody reads stays whole.
  EXPECT_EQ(cpu::SharedReduceNorm::ownRowsSuffice(dp, all), (std::vector<char>{1, 1, 0}));
  // A reader that is not a shared step's residual: the sum is needed whole.
  std::vector<char> notShared = all;
  notShared[1] = 0;
  EXPECT_EQ(cpu::SharedReduceNorm::ownRowsSuffice(dp, notShared), (std::vector<char>{0, 0, 0}));
  dp.steps.push_back(step(OpKind::Copy, {7}, {11}));
  EXPECT_EQ(cpu::SharedReduceNorm::ownRowsSuffice(dp, {1, 1, 1, 0}), (std::vector<char>{1, 0, 0, 0}));
  // Read after a step wrote the sum's tensor again: that reader reads the new value.
  dp.steps[3] = step(OpKind::Copy, {0}, {5});
  dp.steps.push_back(step(OpKind::Copy, {5}, {12}));
  EXPECT_EQ(cpu::SharedReduceNorm::ownRowsSuffice(dp, {1, 1, 1, 0, 0}), (std::vector<char>{1, 1, 0, 0, 0}));
  // The sum as an addend, not as the residual.
  dp.steps[1].inputs = {5, 1, 4};
  EXPECT_EQ(cpu::SharedReduceNorm::ownRowsSuffice(dp, {1, 1, 1, 0, 0})[0], 0);
}

TEST(SharedReduceNorm, ChainedReducesGiveTheTokenByTokenBits) {
  for (bool readSum : {false, true})
    for (int devices : {2, 3}) {
      SCOPED_TRACE(std::string(readSum ? "first sum read whole" : "first sum as residual") + ", devices " +
                   std::to_string(devices));
      PlanMaker mk = chainedReducePlan(devices, readSum);
      std::vector<int32_t> ids, pos;
      for (int32_t i = 0; i < 20; ++i) {
        ids.push_back((i * 7 + 3) % kTable);
        pos.push_back(i);
      }
      auto comm = std::make_shared<CountingComm>(devices);
      SessionOptions o = mk.options(devices, 32);
      o.comm = comm;
      auto s = Session::open(mk.plan, o);
      ASSERT_TRUE(s) << s.message();
      auto whole = (*s)->evaluate(ids, pos);
      ASSERT_TRUE(whole) << whole.message();
      EXPECT_EQ(comm->barriers.load(), 4 * devices); // both reduces on the shared path
      std::vector<float> oneByOne;
      for (size_t i = 0; i < ids.size(); ++i) { // the communicator's composition, every row everywhere
        auto r = (*s)->evaluate({ids[i]}, {pos[i]});
        ASSERT_TRUE(r) << r.message();
        oneByOne.insert(oneByOne.end(), r->begin(), r->end());
      }
      ASSERT_EQ(whole->size(), 20u * 2 * kN);
      EXPECT_EQ(*whole, oneByOne);
    }
}

// ---- logits gathers nobody reads -------------------------------------------------------------------

/// logits = x · Wᵀ split by vocabulary rows over 2 devices and gathered into each device's logits; with
/// `readBack`, device 1 copies its gathered logits into an activation afterwards (so they are read).
PlanMaker vocabPlan(bool readBack) {
  const std::vector<float> emb = randomFloats(kTable * kK, 31), w = randomFloats(96 * kK, 32);
  PlanMaker mk(2, 8, 96);
  for (int d = 0; d < 2; ++d) {
    const int32_t x = mk.tokenInput(d, {kK}, emb);
    const std::vector<float> rows(w.begin() + d * 48 * kK, w.begin() + (d + 1) * 48 * kK);
    const int32_t wd = mk.weightF32(d, {48, kK}, rows), part = mk.act(d, {-1, 48});
    mk.b(d).step(OpKind::Matmul, {x, wd}, {part}, {}, {}, "vocab");
    mk.b(d).step(OpKind::AllGather, {part}, {mk.logits[d]}, AxisParams{1}.pack().ints, {}, "gather");
    if (readBack && d == 1)
      mk.b(d).step(OpKind::Copy, {mk.logits[d]}, {mk.act(d, {-1, 96})}, {}, {}, "reads");
  }
  return mk;
}

TEST(UnusedGathers, DevicesWhoseLogitsNobodyReadsContributeTheirPartOnly) {
  for (bool readBack : {false, true}) {
    SCOPED_TRACE(readBack);
    PlanMaker mk = vocabPlan(readBack);
    auto comm = std::make_shared<CountingComm>(2);
    SessionOptions o = mk.options(2, 16);
    o.comm = comm;
    auto s = Session::open(mk.plan, o);
    ASSERT_TRUE(s) << s.message();
    auto r = (*s)->evaluate({1, 5, 9}, {0, 1, 2});
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(comm->gathers.load(), 2);
    EXPECT_EQ(comm->nullWholes.load(), readBack ? 0 : 1); // device 1's, unless a later step reads it
    // Device 0's logits hold both halves: the product against the f32 weight (activations as f32 rows).
    ASSERT_EQ(r->size(), 3u * 96u);
    const std::vector<float> emb = randomFloats(kTable * kK, 31), w = randomFloats(96 * kK, 32);
    const int ids[3] = {1, 5, 9};
    for (int t = 0; t < 3; ++t)
      for (int v = 0; v < 96; ++v) {
        double want = 0;
        for (int64_t j = 0; j < kK; ++j)
          want += double(emb[ids[t] * kK + j]) * w[v * kK + j];
        EXPECT_NEAR((*r)[t * 96 + v], want, 1e-3 * (1 + std::fabs(want))) << t << " " << v;
      }
  }
}

} // namespace
