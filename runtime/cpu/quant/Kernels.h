//===- Kernels.h - per-ISA kernel tables (internal) ---------------*- C++ -*-===//
//
// Internal to runtime/cpu (the matmul driver and the kernel tests): each ISA's translation unit fills a
// table indexed by ggml type id; types it has no specialised kernel for keep the entry of the table it
// starts from (the next ISA down), so every table covers every supported type.
//
// Two families of kernels:
//  - ActQ8 / f32 kernels (activationFormat() != Legacy): row kernels that dot one weight row in its own
//    blocks with up to kMaxRowTokens activation rows (decode and small batches), and for SIMD ISAs panel
//    kernels for prefill: `convert` unpacks up to kPanelRows weight rows into groups of R rows interleaved
//    four bytes at a time (R = panelRows: 8 on AVX2, one int32 lane per row; 16 on AVX-512), and `tile`
//    sweeps up to kMaxTileTokens tokens over one group with a register tile, so no horizontal sums are
//    needed and every weight byte is unpacked once per panel instead of once per token.
//  - Legacy kernels: one weight row against one activation row of type vecDotType(t).
//
// Panel group layout, per 32-element block (40 * R bytes): float a[R], 4-byte b[R], quants[32 * R] where
// quant vector j (32 * ... bytes) holds elements 4j..4j+3 of each row. For q4_0/q5_0/q4_1/q5_1/q4_K/q5_K/
// mxfp4 (and q8_0 on VNNI, stored as q + 128) the quants are unsigned, a = the row's block scale and b = the
// float that multiplies the token's d * sum(q) (the offset or min term); b is read only for the formats'
// own terms (q4_1/q5_1 m, q4_K/q5_K mins): an implied offset (q4_0 8, q5_0 16, mxfp4 12, VNNI q8_0 128)
// comes off the int32 sum instead, as offset * sum(q) (a float offset term would cancel most of the
// product term, see tileUnsigned); for q8_0 without VNNI the quants are signed and b is unused; for q6_K, a = the
// super-block scale d and b = the two int16 scales of the block's 16-element halves (the grid types,
// IQ2_*/IQ3_*/IQ1_*, use the same with their values stored as q + 64: GridPanelX86.inc). Float weights: R floats per element (k * R floats per group).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_QUANT_KERNELS_H
#define TPC_RUNTIME_CPU_QUANT_KERNELS_H

#include "runtime/cpu/quant/Quant.h"

#include <cstddef>
#include <cstdint>

namespace tpc::rt::cpu {

/// Most tokens one row-kernel call takes.
constexpr int kMaxRowTokens = 8;
/// Most tokens one tile call takes.
constexpr int kMaxTileTokens = 8;
/// Weight rows per panel (a multiple of every ISA's R).
constexpr int kPanelRows = 32;

/// out[t] = (weight row w) . act[t] for t < nt (1 <= nt <= kMaxRowTokens); act rows are ActQ8 rows for the
/// quantized types, f32 rows for the float types. A token's result does not depend on nt or on its place in
/// the call, except where KernelTable::batchFrom is set: there calls of batchFrom or more tokens run another
/// kernel (rows in lanes) whose float order differs from the one-token kernel's (the same bits for every
/// such nt; calls of fewer tokens give the one-token bits).
using RowKernel = void (*)(int64_t k, const void *w, const void *const *act, int nt, float *out);

/// out[t][r] = (weight row r, at w + r * stride) . act[t] for r < rows and t < nt (1 <= nt <=
/// kMaxRowTokens): the decode loop over a run of rows inside the kernel, so there is no call per row and
/// SIMD kernels can take rows in pairs that share the activation loads and the horizontal reductions, or
/// eight rows at a time in the lanes of a vector (LanesX86.inc). Each output is bit-identical to the row
/// kernel's for that row and token called with the same nt, whatever the run's start and length are.
using RowsKernel = void (*)(int64_t k, const void *w, size_t stride, int64_t rows, const void *const *act, int nt,
                            float *const *out);

/// Converts `rows` (<= kPanelRows) weight rows, `stride` bytes apart, into ceil(kPanelRows / R) groups at
/// dst (panelGroupBytes each); rows past `rows` become zero rows.
using PanelConvert = void (*)(int64_t k, const void *w, size_t stride, int rows, uint8_t *dst);

/// out[t][r] = (row r of the group) . act[t] for r < R and t < nt (1 <= nt <= kMaxTileTokens).
using PanelTile = void (*)(int64_t k, const uint8_t *group, const void *const *act, int nt, float *const *out);

/// Bytes of one R-row panel group of k elements of weight type t.
size_t panelGroupBytes(GGMLType t, int64_t k, int R);

/// Kernels by type id.
struct KernelTable {
  static constexpr uint32_t kSize = 40;
  // Legacy kernels.
  VecDotFn fns[kSize] = {};
  QuantizeFn quant[kSize] = {};
  // ActQ8 / f32 kernels.
  QuantizeFn quantizeQ8 = nullptr; ///< float row -> ActQ8 row (bit-identical to quantizeActQ8Row)
  RowKernel row[kSize] = {};
  RowsKernel rows[kSize] = {}; ///< set wherever row is
  /// > 1 where row / rows sum calls of that many tokens or more in another float order than calls of one
  /// (RowKernel); 0 where every call gives the one-token bits.
  uint8_t batchFrom[kSize] = {};
  /// Tokens from which row / rows run rows in lanes (LanesX86.inc: the panel tiles' float order); 0: never.
  /// 1 (q8_0, q4_0 on VNNI: faster than the row kernels even for one token) leaves batchFrom 0.
  uint8_t lanesFrom[kSize] = {};
  int panelRows = 0; ///< R; 0: no panel kernels
  PanelConvert convert[kSize] = {};
  PanelTile tile[kSize] = {};

  /// Installs a fast legacy quantizer for activation type `t`.
  void setQuantize(GGMLType t, QuantizeFn f) { quant[static_cast<uint32_t>(t)] = f; }
  /// The fast legacy quantizer for `t`, or nullptr.
  QuantizeFn getQuantize(GGMLType t) const { return at(quant, t); }
  /// Installs the legacy kernel for `t`.
  void set(GGMLType t, VecDotFn f) { fns[static_cast<uint32_t>(t)] = f; }
  /// The legacy kernel for `t`, or nullptr.
  VecDotFn get(GGMLType t) const { return at(fns, t); }
  /// The row kernel for `t`, or nullptr.
  RowKernel getRow(GGMLType t) const { return at(row, t); }
  /// The row-range kernel for `t`, or nullptr.
  RowsKernel getRows(GGMLType t) const { return at(rows, t); }
  /// The panel converter for `t`, or nullptr.
  PanelConvert getConvert(GGMLType t) const { return at(convert, t); }
  /// The panel tile for `t`, or nullptr.
  PanelTile getTile(GGMLType t) const { return at(tile, t); }

private:
  template <typename F> static F at(F const (&a)[kSize], GGMLType t) {
    uint32_t i = static_cast<uint32_t>(t);
    return i < kSize ? a[i] : nullptr;
  }
};

/// The portable kernels (no panels).
KernelTable scalarKernelTable();
/// AVX2 + FMA + F16C kernels over `base`. Call only when isaAvailable(Isa::AVX2).
KernelTable avx2KernelTable(const KernelTable &base);
/// AVX-512 (F, BW, VL, DQ) panel kernels over `base` (the AVX2 table). Call only when
/// isaAvailable(Isa::AVX512).
KernelTable avx512KernelTable(const KernelTable &base);
/// AVX-512 VNNI kernels over `base`. Call only when isaAvailable(Isa::AVX512VNNI).
KernelTable avx512VnniKernelTable(const KernelTable &base);
/// The VNNI code paths built for AVX2 with vpdpbusd emulated exactly (R = 8): lets an AVX2-only machine run
/// the logic of the AVX-512 kernels. Tests only. Call only when isaAvailable(Isa::AVX2).
KernelTable emulatedVnniKernelTable(const KernelTable &base);

/// The table for `isa`, falling back to the best available one below it; built once.
const KernelTable &kernelTable(Isa isa);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_QUANT_KERNELS_H
