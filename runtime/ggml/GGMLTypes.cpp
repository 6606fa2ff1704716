//===- GGMLTypes.cpp - ggml tensor element types ----------------------------===//
//
// Block sizes follow ggml's block structs (ggml-common.h): e.g. block_q4_K is
// d, dmin (2 x f16) + scales[12] + qs[128] = 144 bytes for 256 elements.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/GGMLTypes.h"

#include <cctype>
#include <iterator>

namespace tpc {
namespace {
constexpr GGMLTypeInfo kTable[] = {
    {GGMLType::F32, "f32", 1, 4, false},
    {GGMLType::F16, "f16", 1, 2, false},
    {GGMLType::Q4_0, "q4_0", 32, 18, true},
    {GGMLType::Q4_1, "q4_1", 32, 20, true},
    {GGMLType::Q5_0, "q5_0", 32, 22, true},
    {GGMLType::Q5_1, "q5_1", 32, 24, true},
    {GGMLType::Q8_0, "q8_0", 32, 34, true},
    {GGMLType::Q8_1, "q8_1", 32, 36, true},
    {GGMLType::Q2_K, "q2_K", 256, 84, true},
    {GGMLType::Q3_K, "q3_K", 256, 110, true},
    {GGMLType::Q4_K, "q4_K", 256, 144, true},
    {GGMLType::Q5_K, "q5_K", 256, 176, true},
    {GGMLType::Q6_K, "q6_K", 256, 210, true},
    {GGMLType::Q8_K, "q8_K", 256, 292, true},
    {GGMLType::IQ2_XXS, "iq2_xxs", 256, 66, true},
    {GGMLType::IQ2_XS, "iq2_xs", 256, 74, true},
    {GGMLType::IQ3_XXS, "iq3_xxs", 256, 98, true},
    {GGMLType::IQ1_S, "iq1_s", 256, 50, true},
    {GGMLType::IQ4_NL, "iq4_nl", 32, 18, true},
    {GGMLType::IQ3_S, "iq3_s", 256, 110, true},
    {GGMLType::IQ2_S, "iq2_s", 256, 82, true},
    {GGMLType::IQ4_XS, "iq4_xs", 256, 136, true},
    {GGMLType::I8, "i8", 1, 1, false},
    {GGMLType::I16, "i16", 1, 2, false},
    {GGMLType::I32, "i32", 1, 4, false},
    {GGMLType::I64, "i64", 1, 8, false},
    {GGMLType::F64, "f64", 1, 8, false},
    {GGMLType::IQ1_M, "iq1_m", 256, 56, true},
    {GGMLType::BF16, "bf16", 1, 2, false},
    {GGMLType::TQ1_0, "tq1_0", 256, 54, true},
    {GGMLType::TQ2_0, "tq2_0", 256, 66, true},
    {GGMLType::MXFP4, "mxfp4", 32, 17, true},
};

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}
} // namespace

const GGMLTypeInfo *ggmlTypeInfo(uint32_t id) {
  for (const GGMLTypeInfo &t : kTable)
    if (static_cast<uint32_t>(t.type) == id)
      return &t;
  return nullptr;
}

std::optional<GGMLType> ggmlTypeFromName(std::string_view name) {
  for (const GGMLTypeInfo &t : kTable)
    if (equalsIgnoreCase(t.name, name))
      return t.type;
  return std::nullopt;
}

std::optional<uint64_t> ggmlRowBytes(GGMLType t, uint64_t elems) {
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  if (elems % info.blockElems != 0)
    return std::nullopt;
  uint64_t blocks = elems / info.blockElems;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info.blockBytes), &bytes))
    return std::nullopt;
  return bytes;
}

const GGMLTypeInfo *ggmlTypeTableBegin() { return std::begin(kTable); }
const GGMLTypeInfo *ggmlTypeTableEnd() { return std::end(kTable); }

} // namespace tpc
