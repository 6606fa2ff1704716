//===- GGMLTypes.h - ggml tensor element types --------------------*- C++ -*-===//
//
// The table of ggml tensor types as stored in GGUF files: the numeric id written in a tensor info, the
// number of elements in one quantization block and the bytes one block occupies. Shared by the GGUF
// reader (compiler), `tpc synth`, the plan and the runtime kernels, so it lives at the bottom layer and
// has no dependencies.
//
// A tensor whose innermost dimension is ne0 stores ne0 / blockElems blocks per row; ne0 must be a multiple
// of blockElems. Ids with no entry (removed types such as 4, 5, 31..33, 36..38) are unknown types.
//
// Usage:
//   const tpc::GGMLTypeInfo *t = tpc::ggmlTypeInfo(id);   // nullptr for an unknown id
//   std::optional<uint64_t> b = tpc::ggmlRowBytes(GGMLType::Q4_K, 4096);   // nullopt if not whole blocks
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_GGML_GGMLTYPES_H
#define TPC_RUNTIME_GGML_GGMLTYPES_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace tpc {

/// ggml's type ids, as written in GGUF tensor infos (ggml.h `enum ggml_type`).
enum class GGMLType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

/// One row of the type table.
struct GGMLTypeInfo {
  GGMLType type;
  const char *name;     ///< ggml's name: "f32", "q4_K", ...
  uint32_t blockElems;  ///< elements per block (1 for plain types)
  uint32_t blockBytes;  ///< bytes per block
  bool quantized;       ///< block-quantized (split granule = blockElems along the row)
};

/// The entry for a type id, or nullptr when the id is not a known type.
const GGMLTypeInfo *ggmlTypeInfo(uint32_t id);
inline const GGMLTypeInfo &ggmlTypeInfo(GGMLType t) { return *ggmlTypeInfo(static_cast<uint32_t>(t)); }

/// The type whose name is `name` (case-insensitive: "Q4_K", "q4_k", "F32"), or nullopt.
std::optional<GGMLType> ggmlTypeFromName(std::string_view name);

/// Name of a type ("q4_K").
inline const char *ggmlTypeName(GGMLType t) { return ggmlTypeInfo(t).name; }

/// Bytes of `elems` consecutive elements of a row; nullopt when elems is not a whole number of blocks or
/// the product overflows.
std::optional<uint64_t> ggmlRowBytes(GGMLType t, uint64_t elems);

/// All known types, in id order (for tables and tests).
const GGMLTypeInfo *ggmlTypeTableBegin();
const GGMLTypeInfo *ggmlTypeTableEnd();

} // namespace tpc

#endif // TPC_RUNTIME_GGML_GGMLTYPES_H
