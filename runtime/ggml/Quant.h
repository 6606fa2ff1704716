//===- Quant.h - reference conversion between ggml rows and floats -*- C++ -*-===//
//
// The format layer's view of the ggml element types: which types can be read (dequantized) and written
// (quantized), and the reference conversions themselves. Shared by the compiler (`tpc synth` writes models
// with quantizeRow), both backends (the CPU kernels fall back to dequantizeRow; the CUDA tests check their
// decoders against it) and the tests. Backend kernels (dot products, activation formats) live with their
// backend, never here.
//
// Rows must hold whole blocks (n a multiple of the type's block size); the functions check this and throw
// std::invalid_argument with a message naming the type, never crash on an unsupported type.
//
// Usage:
//   std::vector<float> row(n);
//   tpc::dequantizeRow(GGMLType::Q4_K, src, row.data(), n);   // n % 256 == 0
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_GGML_QUANT_H
#define TPC_RUNTIME_GGML_QUANT_H

#include "runtime/ggml/GGMLTypes.h"

#include <cstdint>

namespace tpc {

/// True when dequantizeRow reads `t` (the types the runtime can run).
bool supportsDequantize(GGMLType t);
/// True when quantizeRow can produce `t`.
bool supportsQuantize(GGMLType t);

/// Writes the n values of a row of type `t` to dst as floats. Throws std::invalid_argument for an
/// unsupported type or an n that is not a whole number of blocks.
void dequantizeRow(GGMLType t, const void *src, float *dst, int64_t n);

/// Quantizes n floats into a row of type `t` (reference quantizers: valid blocks, finite scales). Throws
/// std::invalid_argument for a type without a quantizer or an n that is not a whole number of blocks.
void quantizeRow(GGMLType t, const float *src, void *dst, int64_t n);

} // namespace tpc

#endif // TPC_RUNTIME_GGML_QUANT_H
