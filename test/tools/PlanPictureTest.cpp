//===- PlanPictureTest.cpp - the facts `tpc inspect --html/--svg` draws -----===//
//
// Weight cuts and split states on hand-built plans, so cuts the compiler does not make yet (whole experts
// per device: expert parallelism) are covered too: the axis and caption come from the slices' pieces and
// local shapes, the dataflow's states from the weights' cuts through the steps.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"
#include "tools/tpc/PlanPicture.h"

#include <gtest/gtest.h>

namespace tpc::cli::picture {
namespace {

constexpr uint64_t kBase = 4096; ///< where the test tensors start in the (imaginary) GGUF

/// An f32 weight slice `name` of local `shape` made of `pieces`.
rt::WeightSlice slice(const std::string &name, std::vector<int64_t> shape, std::vector<rt::WeightPiece> pieces) {
  rt::WeightSlice w;
  w.name = name;
  w.type = GGMLType::F32;
  w.shape = std::move(shape);
  for (const rt::WeightPiece &p : pieces)
    w.bytes += p.rows * p.rowBytes;
  w.pieces = std::move(pieces);
  return w;
}

/// A two-device plan where device d holds slices[d] of one weight, read by `op` (Matmul or MulMatId) in
/// blk.0 from a mirrored input, followed by an all-reduce.
rt::Plan planWith(const std::vector<rt::WeightSlice> &slices, rt::OpKind op) {
  rt::Plan plan;
  plan.model.defaultCtx = 16;
  for (const rt::WeightSlice &w : slices) {
    rt::DevicePlan &dev = plan.devices.emplace_back();
    rt::DevicePlanBuilder b(dev);
    const int32_t tok = b.io(rt::Storage::InputTokens, rt::DType::I32, {-1});
    const int32_t x = b.activation(rt::DType::F32, {-1, 32}, 0);
    b.step(rt::OpKind::Scale, {tok}, {x}, {}, {1.0f}, "scale"); // the embedding stand-in
    const int32_t wt = b.weight(b.addWeight(w));
    const int32_t y = b.activation(rt::DType::F32, {-1, 2, 8}, 1024);
    if (op == rt::OpKind::MulMatId) {
      const int32_t ids = b.activation(rt::DType::I32, {-1, 2}, 2048);
      b.step(rt::OpKind::TopK, {x}, {ids}, {2}, {}, "blk.0.top_k");
      b.step(op, {x, wt, ids}, {y}, {}, {}, "blk.0.mul_mat_id");
    } else {
      b.step(op, {x, wt}, {y}, {}, {}, "blk.0.matmul");
    }
    const int32_t z = b.activation(rt::DType::F32, {-1, 2, 8}, 3072);
    b.step(rt::OpKind::AllReduce, {y}, {z}, {}, {}, "blk.0.all_reduce");
    b.step(rt::OpKind::Scale, {z}, {x}, {}, {1.0f}, ""); // unstamped: stays in blk.0
    b.step(rt::OpKind::Softmax, {x}, {x}, {}, {}, "output.softmax");
  }
  return plan;
}

const WeightCut &only(const Picture &p) {
  EXPECT_EQ(p.weights.size(), 1u);
  return p.weights.at(0);
}

/// The state of the result of the step named `name` in blk.0's dataflow.
State stateOf(const Picture &p, const std::string &name) {
  for (const std::vector<FlowNode> &layer : p.flows)
    for (const FlowNode &n : layer)
      if (n.name == name)
        return n.state;
  ADD_FAILURE() << "no step " << name;
  return State::Unknown;
}

TEST(PlanPicture, WholeExpertsPerDeviceAreAnAxis0CutAndAPartialSum) {
  // [4 experts, 8, 32] f32: a row is 128 bytes, an expert 8 rows; device d copies experts 2d, 2d+1 at once.
  Picture p = buildPicture(planWith({slice("blk.0.ffn_up_exps.weight", {2, 8, 32}, {{kBase, 128, 128, 16}}),
                                     slice("blk.0.ffn_up_exps.weight", {2, 8, 32}, {{kBase + 16 * 128, 128, 128, 16}})},
                                    rt::OpKind::MulMatId),
                           "plan.bin", 0);
  const WeightCut &c = only(p);
  EXPECT_FALSE(c.mirrored);
  EXPECT_EQ(c.axis, 0);
  EXPECT_FALSE(c.innermost);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{4, 8, 32}));
  EXPECT_EQ(c.totalRows, 32u);
  EXPECT_EQ(c.rowBytes, 128u);
  EXPECT_EQ(c.describe(), "axis 0 (experts): 2 + 2 of 4");
  ASSERT_EQ(c.shares[1].runs.size(), 1u);
  EXPECT_EQ(c.shares[1].runs[0].row0, 16u);
  EXPECT_EQ(c.shares[1].runs[0].rows, 16u);
  EXPECT_EQ(stateOf(p, "blk.0.top_k"), State::Mirrored);
  EXPECT_EQ(stateOf(p, "blk.0.mul_mat_id"), State::Partial);
  EXPECT_EQ(stateOf(p, "blk.0.all_reduce"), State::Mirrored);
}

TEST(PlanPicture, RowsOfEveryExpertAreAnAxis1CutAndASplitResult) {
  // Device d copies rows 4d..4d+3 of each of 4 experts: one run per expert.
  std::vector<rt::WeightSlice> s;
  for (uint64_t d = 0; d < 2; ++d) {
    std::vector<rt::WeightPiece> pieces;
    for (uint64_t e = 0; e < 4; ++e)
      pieces.push_back({kBase + (e * 8 + d * 4) * 128, 128, 128, 4});
    s.push_back(slice("blk.0.ffn_up_exps.weight", {4, 4, 32}, pieces));
  }
  Picture p = buildPicture(planWith(s, rt::OpKind::MulMatId), "plan.bin", 0);
  const WeightCut &c = only(p);
  EXPECT_EQ(c.axis, 1);
  EXPECT_EQ(c.describe(), "axis 1 (rows per expert): 4 + 4 of 8");
  EXPECT_EQ(c.shares[1].runs.size(), 4u);
  EXPECT_EQ(c.shares[1].runs[3].row0, 28u);
  EXPECT_EQ(stateOf(p, "blk.0.mul_mat_id"), State::Split);
}

TEST(PlanPicture, ColumnsAreTheInnermostAxisAndAPartialSum) {
  // [16, 64] f32 (256-byte rows), device d copies bytes 128d..128d+127 of every row.
  Picture p = buildPicture(planWith({slice("blk.0.ffn_down.weight", {16, 32}, {{kBase, 256, 128, 16}}),
                                     slice("blk.0.ffn_down.weight", {16, 32}, {{kBase + 128, 256, 128, 16}})},
                                    rt::OpKind::Matmul),
                           "plan.bin", 0);
  const WeightCut &c = only(p);
  EXPECT_EQ(c.axis, 1);
  EXPECT_TRUE(c.innermost);
  EXPECT_EQ(c.describe(), "axis 1 (columns): 32 + 32 of 64");
  EXPECT_EQ(c.shares[1].runs[0].col0, 128u);
  EXPECT_EQ(stateOf(p, "blk.0.matmul"), State::Partial);
}

TEST(PlanPicture, AnEmptyShareNamesTheAxisByShape) {
  Picture p = buildPicture(planWith({slice("blk.0.attn_output.weight", {16, 32}, {{kBase, 128, 128, 16}}),
                                     slice("blk.0.attn_output.weight", {16, 0}, {})},
                                    rt::OpKind::Matmul),
                           "plan.bin", 0);
  EXPECT_EQ(only(p).axis, 1);
  EXPECT_EQ(only(p).describe(), "axis 1 (columns): 32 + 0 of 32");
}

TEST(PlanPicture, MirroredWeightsKeepTheInputsState) {
  rt::WeightSlice w = slice("blk.0.attn_q.weight", {16, 32}, {{kBase, 128, 128, 16}});
  Picture p = buildPicture(planWith({w, w}, rt::OpKind::Matmul), "plan.bin", 0);
  EXPECT_TRUE(only(p).mirrored);
  EXPECT_EQ(only(p).describe(), "mirrored: whole on every device");
  EXPECT_EQ(stateOf(p, "blk.0.matmul"), State::Mirrored);
}

TEST(PlanPicture, LayersComeFromStepNamesAndLayerChoicesAreChecked) {
  rt::WeightSlice w = slice("blk.0.attn_q.weight", {16, 32}, {{kBase, 128, 128, 16}});
  Picture p = buildPicture(planWith({w, w}, rt::OpKind::Matmul), "plan.bin", 0);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_EQ(p.layers[0].label, "embed");
  EXPECT_EQ(p.layers[1].label, "blk.0");
  EXPECT_EQ(p.layers[2].label, "output");
  // Three columns, one block: the page's header counts blocks (it once said "3 layers" here).
  EXPECT_EQ(p.blocks, 1);
  EXPECT_NE(renderHtml(p).find("data-blocks=\"1\">"), std::string::npos);
  EXPECT_EQ(p.flows[1].size(), 3u); // matmul, all_reduce and the unstamped scale after them
  EXPECT_EQ(p.flows[1][1].from, (std::vector<size_t>{0}));
  EXPECT_EQ(p.chosenLayer, 1u);
  EXPECT_EQ(findLayer(p, "0"), 1u);
  EXPECT_EQ(findLayer(p, "output"), 2u);
  try {
    findLayer(p, "5");
    FAIL() << "no error for a missing layer";
  } catch (const Failure &e) {
    EXPECT_STREQ(e.what(), "--layer 5: plan.bin has no such layer; give embed, output, a block 0..0");
  }
  ASSERT_EQ(p.lanes.size(), 2u);
  ASSERT_EQ(p.lanes[0].size(), 1u);
  EXPECT_EQ(p.lanes[0][0].bytesPerToken, 2u * 8 * 4); // the all-reduce's [T, 2, 8] f32 output per token
}

} // namespace
} // namespace tpc::cli::picture
