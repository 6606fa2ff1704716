//===- OutputRowsTest.cpp - logits rows per call, on hand-built plans --------===//
//
// The session side of output rows (runtime/exec/Session.h): a plan with the rows input computes only the
// rows a batch asks for, at most max_output_rows per chunk (a request for more runs in more chunks, and a
// chunk that asks for none still computes one), returned in batch order; a plan without it (schema <= 4,
// or hand-built) computes every row and the session picks. The plan here makes a token's logits row its
// row of a table, so every returned row names the token it belongs to.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

constexpr int64_t kVocab = 8;

/// logits[r] = table[tokens[rows[r]]] with table[i][j] = 10 i + j; with `rows` false, one row per token.
PlanMaker tablePlan(int64_t maxBatch, int64_t maxRows, bool rows) {
  PlanMaker m(1, maxBatch, kVocab);
  std::vector<float> table(kVocab * kVocab);
  for (int64_t i = 0; i < kVocab; ++i)
    for (int64_t j = 0; j < kVocab; ++j)
      table[i * kVocab + j] = float(10 * i + j);
  const int32_t w = m.weightF32(0, {kVocab, kVocab}, table);
  if (!rows) {
    m.b(0).step(OpKind::GetRows, {w, m.tokens[0]}, {m.logits[0]});
    return m;
  }
  m.plan.model.maxOutputRows = maxRows;
  m.plan.devices[0].tensors[m.logits[0]].shape = {kRowsDim, kVocab};
  const int32_t in = m.b(0).io(Storage::InputOutputRows, DType::I32, {kRowsDim});
  const int32_t x = m.act(0, {-1, kVocab});
  m.b(0).step(OpKind::GetRows, {w, m.tokens[0]}, {x});
  m.b(0).step(OpKind::GetRows, {x, in}, {m.logits[0]});
  return m;
}

std::vector<float> rowOf(int32_t token) {
  std::vector<float> r(kVocab);
  for (int64_t j = 0; j < kVocab; ++j)
    r[j] = float(10 * token + j);
  return r;
}

TEST(OutputRows, OnlyTheRowsAskedForInChunksOfMaxOutputRows) {
  PlanMaker m = tablePlan(4, 2, true);
  m.options(); // sets the plan's GGUF size to the in-memory weights'
  ASSERT_TRUE(validatePlan(m.plan).empty()) << validatePlan(m.plan)[0];
  auto s = m.open(1);
  ASSERT_TRUE(s);
  // Seven tokens asking for rows 0, 2, 3 and 6: the first chunk ends at its second row (tokens 0..2), the
  // second at max_batch (tokens 3..6, rows 3 and 6).
  std::vector<BatchToken> b;
  const int32_t toks[7] = {5, 1, 7, 2, 0, 3, 6};
  const bool want[7] = {true, false, true, true, false, false, true};
  for (int32_t i = 0; i < 7; ++i)
    b.push_back({toks[i], i, 0, want[i]});
  auto r = s->evaluate(b);
  ASSERT_TRUE(r) << r.message();
  std::vector<float> expect;
  for (int i = 0; i < 7; ++i)
    if (want[i]) {
      std::vector<float> row = rowOf(toks[i]);
      expect.insert(expect.end(), row.begin(), row.end());
    }
  EXPECT_EQ(*r, expect);
  EXPECT_EQ(s->counters().chunks, 2);
  EXPECT_EQ(s->counters().outputRows, 4);
  EXPECT_EQ(s->counters().tokens, 7);
  // No row asked for: nothing returned, one row computed per chunk (the head never runs on zero rows).
  std::vector<BatchToken> none;
  for (int32_t i = 0; i < 5; ++i)
    none.push_back({i, 7 + i, 0, false});
  auto n = s->evaluate(none);
  ASSERT_TRUE(n) << n.message();
  EXPECT_TRUE(n->empty());
  EXPECT_EQ(s->counters().chunks, 4);
  EXPECT_EQ(s->counters().outputRows, 6);
  // The all-rows path: every row, in chunks of two.
  auto all = s->evaluate({4, 4, 1}, {0, 1, 2});
  ASSERT_TRUE(all) << all.message();
  std::vector<float> e3 = rowOf(4), r1 = rowOf(1);
  e3.insert(e3.end(), e3.begin(), e3.end());
  e3.insert(e3.end(), r1.begin(), r1.end());
  EXPECT_EQ(*all, e3);
  EXPECT_EQ(s->counters().chunks, 6);
}

TEST(OutputRows, APlanWithoutTheRowsInputComputesEveryRow) {
  PlanMaker m = tablePlan(4, 0, false);
  auto s = m.open(1);
  ASSERT_TRUE(s);
  auto r = s->evaluate({{3, 0, 0, false}, {6, 1, 0, true}, {2, 2, 0, false}});
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(*r, rowOf(6));
  EXPECT_EQ(s->counters().outputRows, 3);
}

TEST(OutputRows, ThePlanMustPairTheRowsInputWithMaxOutputRows) {
  PlanMaker m = tablePlan(4, 2, true);
  m.plan.model.maxOutputRows = 0;
  std::vector<std::string> errs = validatePlan(m.plan);
  ASSERT_FALSE(errs.empty());
  bool named = false;
  for (const std::string &e : errs)
    named |= e.find("has the output-rows input but max_output_rows is 0") != std::string::npos;
  EXPECT_TRUE(named) << errs[0];
  PlanMaker big = tablePlan(4, 5, true); // more rows than tokens
  errs = validatePlan(big.plan);
  ASSERT_FALSE(errs.empty());
  EXPECT_NE(errs[0].find("max_output_rows 5 must be in 0..max_batch (4)"), std::string::npos) << errs[0];
}

} // namespace
