//===- Quant.h - row dequantization, quantization and dot kernels -*- C++ -*-===//
//
// The CPU backend's dot-product kernels and activation formats (the reference row conversions are the
// format layer's, runtime/ggml/Quant.h, included here). Dot products follow ggml's CPU backend: the activation row
// is quantized once per matmul to the weight type's activation type (Q8_0, Q8_1 or Q8_K; f32 for the float
// weight types), then each weight row is dotted with integer arithmetic per block. That mirrors the
// reference engine's 8-bit activation rounding, which is what keeps our logits close to its logits.
//
// Rows must hold whole blocks (n a multiple of the type's block size); the functions check this and throw
// std::invalid_argument with a message naming the type, never crash on an unsupported type.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_QUANT_QUANT_H
#define TPC_RUNTIME_CPU_QUANT_QUANT_H

#include "runtime/ggml/Quant.h"

#include <cstddef>
#include <cstdint>

namespace tpc::rt::cpu {

/// The type activations are converted to before a dot product with weights of type `t` (F32 for the
/// float weight types).
GGMLType vecDotType(GGMLType t);

/// The instruction sets a kernel table can be built for.
enum class Isa { Scalar, AVX2, AVX512 };

/// Name of an ISA ("scalar", "avx2", "avx512").
const char *isaName(Isa isa);
/// True when this CPU can run kernels built for `isa`.
bool isaAvailable(Isa isa);
/// The best ISA this CPU supports; the environment variable TPC_CPU_ISA (scalar, avx2, avx512) can lower it.
Isa activeIsa();

/// Bytes of an activation row of k elements for weights of type `wType`: a vecDotType(wType) row, then
/// for Q4_K/Q5_K the trailer completeActivationRow writes (16 floats per 256 elements).
uint64_t activationRowBytes(GGMLType wType, int64_t k);

/// Completes an activation row that holds k elements quantized to vecDotType(wType) with what the dot
/// kernels of `wType` read besides the blocks. For Q4_K/Q5_K, per 256 elements: the 8 block scales d and
/// the 8 products d * (sum of the block's quants) as floats (exact: an 11-bit scale times a 13-bit sum),
/// which the SIMD kernels would otherwise recompute for every weight row (the min term). A no-op for the
/// other types. `row` must hold activationRowBytes(wType, k) bytes.
void completeActivationRow(GGMLType wType, void *row, int64_t k);

/// Dot product of k elements of a weight row `w` (type t) and an activation row `a` of type
/// vecDotType(t) completed by completeActivationRow(t, a, k).
using VecDotFn = float (*)(int64_t k, const void *w, const void *a);

/// The kernel for weights of type `t` built for `isa`; nullptr when the type is unsupported. An ISA
/// without a specialised kernel for `t` returns the next best one.
VecDotFn vecDotKernel(GGMLType t, Isa isa);

/// Dot products of one weight row with four activation rows a[0..3] into out[0..3]: each weight block is
/// unpacked once for the four tokens (prefill). Bit-identical to four VecDotFn calls.
using VecDot4Fn = void (*)(int64_t k, const void *w, const void *const *a, float *out);

/// The four-token kernel for `t` built for `isa`, or nullptr where there is none (use VecDotFn then).
VecDot4Fn vecDot4Kernel(GGMLType t, Isa isa);

/// Quantizes n floats (whole blocks) to an activation type.
using QuantizeFn = void (*)(const float *src, void *dst, int64_t n);

/// Quantizes an activation row to Q8_0 / Q8_1 the way the reference engine (ik_llama.cpp, CPU) does before
/// its 32-block dot products: scale = amax / 127 rounded to bf16 and quants = round(x / scale). Measured on
/// the fixtures this brings Q8_0 models from rms 0.018 to 0.007 of the reference logits (f32 activations:
/// 0.0145). Q8_K (and every other type) is quantizeRow's.
void quantizeActivationRow(GGMLType t, const float *src, void *dst, int64_t n);

/// The quantizer matmul uses for activation type `t` (Q8_0, Q8_1, Q8_K) on `isa`: a SIMD one where there
/// is one, bit-identical to quantizeActivationRow; otherwise quantizeActivationRow. nullptr for other types.
QuantizeFn activationQuantizer(GGMLType t, Isa isa);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_QUANT_QUANT_H
