//===- TypeTableTest.cpp - the ggml type table against ggml's structs -------===//
//
// The expected block sizes are written as ggml-common.h composes its block structs (QK_K = 256,
// K_SCALE_SIZE = 12, ggml_half = 2 bytes), independently of the literal numbers in GGMLTypes.cpp.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/GGMLTypes.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace tpc;

namespace {
constexpr uint32_t QK_K = 256, QK4_0 = 32, QK8_0 = 32, K_SCALE_SIZE = 12, H = 2 /* ggml_half */;

struct Expected {
  uint32_t id;
  const char *name;
  uint32_t elems;
  uint32_t bytes;
};

const Expected kGGML[] = {
    {0, "f32", 1, 4},
    {1, "f16", 1, 2},
    {2, "q4_0", QK4_0, H + QK4_0 / 2},
    {3, "q4_1", 32, 2 * H + 32 / 2},
    {6, "q5_0", 32, H + 4 + 32 / 2},
    {7, "q5_1", 32, 2 * H + 4 + 32 / 2},
    {8, "q8_0", QK8_0, H + QK8_0},
    {9, "q8_1", 32, 2 * H + 32},
    {10, "q2_K", QK_K, 2 * H + QK_K / 16 + QK_K / 4},
    {11, "q3_K", QK_K, H + QK_K / 4 + QK_K / 8 + 12},
    {12, "q4_K", QK_K, 2 * H + K_SCALE_SIZE + QK_K / 2},
    {13, "q5_K", QK_K, 2 * H + K_SCALE_SIZE + QK_K / 8 + QK_K / 2},
    {14, "q6_K", QK_K, H + QK_K / 16 + 3 * QK_K / 4},
    {15, "q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2},
    {16, "iq2_xxs", QK_K, H + QK_K / 8 * 2},
    {17, "iq2_xs", QK_K, H + QK_K / 8 * 2 + QK_K / 32},
    {18, "iq3_xxs", QK_K, H + 3 * QK_K / 8},
    {19, "iq1_s", QK_K, H + QK_K / 8 + QK_K / 32 * 2},
    {20, "iq4_nl", 32, H + 32 / 2},
    {21, "iq3_s", QK_K, H + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64},
    {22, "iq2_s", QK_K, H + QK_K / 4 + QK_K / 32 + QK_K / 32},
    {23, "iq4_xs", QK_K, H + 2 + QK_K / 64 + QK_K / 2},
    {24, "i8", 1, 1},
    {25, "i16", 1, 2},
    {26, "i32", 1, 4},
    {27, "i64", 1, 8},
    {28, "f64", 1, 8},
    {29, "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32},
    {30, "bf16", 1, 2},
    {34, "tq1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + H},
    {35, "tq2_0", QK_K, QK_K / 4 + H},
    {39, "mxfp4", 32, 1 + 32 / 2},
};
} // namespace

TEST(GGMLTypeTable, MatchesGGMLBlockStructs) {
  for (const Expected &e : kGGML) {
    const GGMLTypeInfo *t = ggmlTypeInfo(e.id);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(static_cast<uint32_t>(t->type), e.id) << e.name;
    EXPECT_STREQ(t->name, e.name);
    EXPECT_EQ(t->blockElems, e.elems) << e.name;
    EXPECT_EQ(t->blockBytes, e.bytes) << e.name;
    EXPECT_EQ(t->quantized, e.elems > 1) << e.name;
  }
  EXPECT_EQ(static_cast<size_t>(ggmlTypeTableEnd() - ggmlTypeTableBegin()), std::size(kGGML));
}

TEST(GGMLTypeTable, RemovedIdsAreUnknown) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u, 0xffffffffu})
    EXPECT_EQ(ggmlTypeInfo(id), nullptr) << id;
}

TEST(GGMLTypeTable, NamesRoundTripCaseInsensitively) {
  std::set<std::string> seen;
  for (const GGMLTypeInfo *t = ggmlTypeTableBegin(); t != ggmlTypeTableEnd(); ++t) {
    EXPECT_TRUE(seen.insert(t->name).second) << t->name;
    std::string upper = t->name;
    for (char &c : upper)
      c = static_cast<char>(toupper(c));
    EXPECT_EQ(ggmlTypeFromName(upper), t->type);
    EXPECT_EQ(ggmlTypeFromName(t->name), t->type);
  }
  EXPECT_EQ(ggmlTypeFromName("q4_k_m"), std::nullopt);
}

TEST(GGMLTypeTable, RowBytes) {
  EXPECT_EQ(ggmlRowBytes(GGMLType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(ggmlRowBytes(GGMLType::Q8_0, 64), 68u);
  EXPECT_EQ(ggmlRowBytes(GGMLType::F16, 3), 6u);
  EXPECT_EQ(ggmlRowBytes(GGMLType::Q4_K, 100), std::nullopt);
  EXPECT_EQ(ggmlRowBytes(GGMLType::F32, UINT64_MAX / 2), std::nullopt) << "overflow";
}
