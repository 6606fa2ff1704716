//===- Quant.h - row dequantization, quantization and dot kernels -*- C++ -*-===//
//
// The CPU backend's ISA selection, activation formats and the legacy dot-product kernels (the reference row
// conversions are the format layer's, runtime/ggml/Quant.h, included here). Activations are quantized once
// to 8 bits with the reference engine's rounding, which is what keeps our logits close to its logits:
// the weight types the fast kernels cover (q4_0, q5_0, q8_0, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, the grid types)
// share the ActQ8 format
// (ActQ8.h, kernels in Kernels.h); the float types read f32 rows; the other types ("legacy": q4_1, q5_1,
// q2_K, q3_K, q8_K, mxfp4) keep one-row dot kernels on ggml's activation types (vecDotType).
//
// Rows must hold whole blocks (n a multiple of the type's block size); the functions check this and throw
// std::invalid_argument with a message naming the type, never crash on an unsupported type.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_QUANT_QUANT_H
#define TPC_RUNTIME_CPU_QUANT_QUANT_H

#include "runtime/ggml/Quant.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpc::rt::cpu {

/// How the kernels of a weight type take their activations.
enum class ActFormat {
  F32,    ///< float weights: the f32 rows themselves
  Q8,     ///< ActQ8 rows (ActQ8.h), shared by every ActQ8 type
  Legacy, ///< one row of vecDotType(t) per token
};

/// The activation format of weight type `t` (Legacy for types the CPU backend cannot run, too).
ActFormat activationFormat(GGMLType t);

/// For Legacy-format types: the ggml type activations are converted to (Q8_0, Q8_1 or Q8_K). F32 for the
/// others.
GGMLType vecDotType(GGMLType t);

/// The instruction sets a kernel table can be built for, in increasing order: AVX2 means AVX2 + FMA + F16C,
/// AVX512 adds F/BW/VL/DQ (512-bit panels), AVX512VNNI adds VNNI (vpdpbusd byte dots).
enum class Isa { Scalar, AVX2, AVX512, AVX512VNNI };

/// Name of an ISA ("scalar", "avx2", "avx512", "avx512vnni").
const char *isaName(Isa isa);
/// True when this CPU can run kernels built for `isa`.
bool isaAvailable(Isa isa);
/// The process's kernel level: the level setActiveIsa() fixed (a CPU session opening first: the level it
/// chose by TPC_CPU_ISA, a calibration or its cache, runtime/cpu/KernelChoice.h), else the environment
/// variable TPC_CPU_ISA (one of the names: a machine with AVX-512 VNNI can run every lower level too), else
/// the best ISA this CPU supports. A name the CPU cannot run, or an unknown one, leaves the best here, and is
/// refused where a CPU session opens (isaOverrideProblem). Reading it fixes nothing (kernels read it per
/// call); tables built once for the process read fixActiveIsa().
Isa activeIsa();
/// activeIsa(), fixed for the rest of the process: what a table built once (element-wise, vector ops) reads,
/// so a later setActiveIsa() cannot leave it on another level than the matmuls.
Isa fixActiveIsa();
/// Fixes activeIsa() to `isa` unless the level is fixed already; true when activeIsa() now answers `isa`
/// (also when it was fixed to it before), false when `isa` is not available or another level is fixed.
bool setActiveIsa(Isa isa);
/// True once fixActiveIsa() or setActiveIsa() has fixed the level.
bool activeIsaFixed();
/// The best ISA this CPU supports (what CPUID alone picks).
Isa bestAvailableIsa();
/// What is wrong with `value` as TPC_CPU_ISA (null: unset), in one line naming the variable and what to do;
/// empty when it is fine.
std::string isaOverrideProblem(const char *value);

/// Bytes of an activation row of k elements for weights of type `wType` in its activation format.
uint64_t activationRowBytes(GGMLType wType, int64_t k);

/// Legacy kernels: dot product of k elements of a weight row `w` (type t) and an activation row `a` of
/// type vecDotType(t).
using VecDotFn = float (*)(int64_t k, const void *w, const void *a);

/// The legacy kernel for weights of type `t` built for `isa`; nullptr when `t` has none (an ActQ8 or float
/// type, or a type the CPU backend cannot run). An ISA without a specialised kernel returns the next best.
VecDotFn vecDotKernel(GGMLType t, Isa isa);

/// Quantizes n floats (whole blocks) to an activation type.
using QuantizeFn = void (*)(const float *src, void *dst, int64_t n);

/// Quantizes a legacy activation row to Q8_0 / Q8_1 the way the reference engine (ik_llama.cpp, CPU) does
/// before its 32-block dot products: scale = amax / 127 rounded to bf16 and quants = round(x / scale).
/// Measured on the fixtures this brings Q8_0 models from rms 0.018 to 0.007 of the reference logits (f32
/// activations: 0.0145). Q8_K (and every other type) is quantizeRow's.
void quantizeActivationRow(GGMLType t, const float *src, void *dst, int64_t n);

/// The quantizer matmul uses for legacy activation type `t` (Q8_0, Q8_1, Q8_K) on `isa`: a SIMD one where
/// there is one, bit-identical to quantizeActivationRow; otherwise quantizeActivationRow. nullptr for other
/// types.
QuantizeFn activationQuantizer(GGMLType t, Isa isa);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_QUANT_QUANT_H
