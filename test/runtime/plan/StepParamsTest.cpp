//===- StepParamsTest.cpp - the typed step parameters, both directions ------===//
//
// Every parameter struct reads back what it packs, packs exactly the counts the loader demands of its op
// (so validatePlan and the accessors cannot disagree), keeps the positional layout plans on disk have
// (ints/floats in the order PlanFormat.h's ops always stored them), and the layout checks name what is
// wrong.
//===----------------------------------------------------------------------===//
#include "runtime/plan/StepParams.h"

#include <gtest/gtest.h>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// A step of `op` holding `p`.
Step stepOf(OpKind op, const PackedParams &p, size_t inputs = 1) {
  Step s;
  s.op = op;
  s.ints = p.ints;
  s.floats = p.floats;
  s.inputs.assign(inputs, 0);
  return s;
}

/// pack() has exactly paramCountsOf(op) values (fixed-size structs) and read() returns what was packed.
template <typename P> void expectCounts(OpKind op, const P &p) {
  const PackedParams packed = p.pack();
  EXPECT_EQ(int(packed.ints.size()), paramCountsOf(op).ints) << opKindName(op);
  EXPECT_EQ(int(packed.floats.size()), paramCountsOf(op).floats) << opKindName(op);
  EXPECT_EQ(checkParamLayout(stepOf(op, packed, op == OpKind::AllReduceRmsNorm ? 3 : 1)), "")
      << opKindName(op);
}

TEST(StepParams, EveryStructReadsBackWhatItPacks) {
  const RopeParams rope{RopeMode::Neox, 64, 1e6f, 0.25f};
  const RopeParams r = RopeParams::read(stepOf(OpKind::Rope, rope.pack()));
  EXPECT_EQ(r.mode, RopeMode::Neox);
  EXPECT_EQ(r.nDims, 64);
  EXPECT_EQ(r.base, 1e6f);
  EXPECT_EQ(r.freqScale, 0.25f);
  expectCounts(OpKind::Rope, rope);

  const AttentionParams att{3, 512, 0.125f, 50.0f};
  const AttentionParams a = AttentionParams::read(stepOf(OpKind::Attention, att.pack()));
  EXPECT_EQ(a.kvCache, 3);
  EXPECT_EQ(a.window, 512);
  EXPECT_EQ(a.scale, 0.125f);
  EXPECT_EQ(a.softcap, 50.0f);
  expectCounts(OpKind::Attention, att);
  EXPECT_FALSE(a.gated);
  AttentionParams gatedAtt = att;
  gatedAtt.gated = true;
  EXPECT_TRUE(AttentionParams::read(stepOf(OpKind::Attention, gatedAtt.pack())).gated);
  EXPECT_EQ(AttentionParams::read(stepOf(OpKind::Attention, gatedAtt.pack())).kvCache, 3);

  const DeltaNetParams dn{4, 0.0883883f};
  EXPECT_EQ(DeltaNetParams::read(stepOf(OpKind::DeltaNet, dn.pack())).kvCache, 4);
  EXPECT_EQ(DeltaNetParams::read(stepOf(OpKind::DeltaNet, dn.pack())).scale, 0.0883883f);
  EXPECT_EQ(stepCache(stepOf(OpKind::DeltaNet, dn.pack())), std::optional<int64_t>(4));
  expectCounts(OpKind::DeltaNet, dn);
  EXPECT_EQ(SsmConvParams::read(stepOf(OpKind::SsmConv, SsmConvParams{2}.pack())).kvCache, 2);
  EXPECT_EQ(stepCache(stepOf(OpKind::SsmConv, SsmConvParams{2}.pack())), std::optional<int64_t>(2));
  expectCounts(OpKind::SsmConv, SsmConvParams{2});
  expectCounts(OpKind::L2Norm, RmsNormParams{1e-6f});
  expectCounts(OpKind::GatedRmsNorm, RmsNormParams{1e-6f});
  EXPECT_EQ(stepCache(stepOf(OpKind::Rope, rope.pack())), std::nullopt);

  const AllReduceRmsNormParams arn{true, false, 1e-6f};
  const AllReduceRmsNormParams n =
      AllReduceRmsNormParams::read(stepOf(OpKind::AllReduceRmsNorm, arn.pack(), 2));
  EXPECT_TRUE(n.residual);
  EXPECT_FALSE(n.weight);
  EXPECT_EQ(n.eps, 1e-6f);
  expectCounts(OpKind::AllReduceRmsNorm, AllReduceRmsNormParams{true, true, 1e-5f});

  const NarrowParams nar{2, 5, 7};
  const NarrowParams v = NarrowParams::read(stepOf(OpKind::Slice, nar.pack()));
  EXPECT_EQ(v.axis, 2);
  EXPECT_EQ(v.offset, 5);
  EXPECT_EQ(v.size, 7);
  expectCounts(OpKind::View, nar);
  expectCounts(OpKind::Slice, nar);

  const SumParams sum{1, true};
  EXPECT_EQ(SumParams::read(stepOf(OpKind::Sum, sum.pack())).axis, 1);
  EXPECT_TRUE(SumParams::read(stepOf(OpKind::Sum, sum.pack())).keepDim);
  expectCounts(OpKind::Sum, sum);

  EXPECT_EQ(RmsNormParams::read(stepOf(OpKind::RmsNorm, RmsNormParams{1e-5f}.pack())).eps, 1e-5f);
  expectCounts(OpKind::RmsNorm, RmsNormParams{1e-5f});
  EXPECT_EQ(ScaleParams::read(stepOf(OpKind::Scale, ScaleParams{-2.5f}.pack())).value, -2.5f);
  expectCounts(OpKind::Scale, ScaleParams{-2.5f});
  EXPECT_EQ(SoftcapParams::read(stepOf(OpKind::Softcap, SoftcapParams{30.0f}.pack())).cap, 30.0f);
  expectCounts(OpKind::Softcap, SoftcapParams{30.0f});
  EXPECT_EQ(UnaryParams::read(stepOf(OpKind::Unary, UnaryParams{UnaryFn::Sigmoid}.pack())).fn,
            UnaryFn::Sigmoid);
  expectCounts(OpKind::Unary, UnaryParams{UnaryFn::Sigmoid});
  EXPECT_EQ(GluParams::read(stepOf(OpKind::Glu, GluParams{UnaryFn::GeluTanh}.pack())).fn, UnaryFn::GeluTanh);
  expectCounts(OpKind::Glu, GluParams{UnaryFn::GeluTanh});
  EXPECT_EQ(TopKParams::read(stepOf(OpKind::TopK, TopKParams{8}.pack())).k, 8);
  expectCounts(OpKind::TopK, TopKParams{8});
  for (OpKind op : {OpKind::Concat, OpKind::ReduceScatter, OpKind::AllGather}) {
    EXPECT_EQ(AxisParams::read(stepOf(op, AxisParams{2}.pack())).axis, 2);
    expectCounts(op, AxisParams{2});
  }

  // Permute holds one int per axis (at least one).
  const PermuteParams perm{{2, 0, 1}};
  EXPECT_EQ(PermuteParams::read(stepOf(OpKind::Permute, perm.pack())).perm, (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(paramCountsOf(OpKind::Permute).ints, 1);

  // GetRows: a whole table stores nothing, a vocabulary-parallel share its first row id (also 0).
  EXPECT_TRUE(GetRowsParams{}.pack().ints.empty());
  EXPECT_FALSE(GetRowsParams::read(stepOf(OpKind::GetRows, {})).firstId.has_value());
  EXPECT_EQ(GetRowsParams::read(stepOf(OpKind::GetRows, GetRowsParams{0}.pack())).firstId, 0);
  EXPECT_EQ(GetRowsParams::read(stepOf(OpKind::GetRows, GetRowsParams{128}.pack())).firstId, 128);
}

TEST(StepParams, PackedLayoutIsThePlanFilesLayout) {
  // Plans on disk store these positions; a change here breaks every compiled plan.
  EXPECT_EQ(RopeParams({RopeMode::Neox, 64, 1e6f, 0.5f}).pack().ints, (std::vector<int64_t>{1, 64}));
  EXPECT_EQ(RopeParams({RopeMode::Neox, 64, 1e6f, 0.5f}).pack().floats, (std::vector<float>{1e6f, 0.5f}));
  EXPECT_EQ(AttentionParams({2, 128, 0.5f, 0}).pack().ints, (std::vector<int64_t>{2, 128}));
  EXPECT_EQ(AttentionParams({2, 128, 0.5f, 0}).pack().floats, (std::vector<float>{0.5f, 0}));
  EXPECT_EQ(AllReduceRmsNormParams({false, true, 1e-6f}).pack().ints, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(SumParams({3, false}).pack().ints, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(NarrowParams({1, 4, 2}).pack().ints, (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(UnaryParams{UnaryFn::Gelu}.pack().ints, (std::vector<int64_t>{1}));
}

TEST(StepParams, LayoutChecksNameWhatIsWrong) {
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Rope, {{0}, {1e4f, 1}})), "needs 2 ints and 2 floats");
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Attention, {{0, 0}, {}})), "needs 2 ints and 2 floats");
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Matmul, {})), "");
  // A replicated matmul says {1}; nothing else is a Matmul parameter.
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Matmul, {{1}, {}})), "");
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Matmul, {{2}, {}})), "ints must be {} or {1} (replicated)");
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::Matmul, {{1, 1}, {}})), "ints must be {} or {1} (replicated)");
  EXPECT_TRUE(MatmulParams::read(stepOf(OpKind::Matmul, {{1}, {}})).replicated);
  EXPECT_FALSE(MatmulParams::read(stepOf(OpKind::Matmul, {})).replicated);
  EXPECT_EQ(MatmulParams{true}.pack().ints, (std::vector<int64_t>{1}));
  EXPECT_TRUE(MatmulParams{false}.pack().ints.empty());
  // AllReduceRmsNorm's flags are 0/1 and count the inputs: x, then r, then w.
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::AllReduceRmsNorm, {{1, 1}, {1e-6f}}, 3)), "");
  EXPECT_EQ(checkParamLayout(stepOf(OpKind::AllReduceRmsNorm, {{1, 0}, {1e-6f}}, 3)),
            "ints (residual 1, weight 0) must be 0/1 and match the 3 inputs");
  EXPECT_NE(checkParamLayout(stepOf(OpKind::AllReduceRmsNorm, {{2, 0}, {1e-6f}}, 3)), "");
  EXPECT_NE(checkParamLayout(stepOf(OpKind::AllReduceRmsNorm, {{-1, 1}, {1e-6f}}, 1)), "");
}

} // namespace
