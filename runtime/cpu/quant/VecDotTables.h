//===- VecDotTables.h - per-ISA kernel tables (internal) ----------*- C++ -*-===//
//
// Internal to runtime/cpu: each ISA's translation unit fills a table of dot kernels indexed by ggml type
// id; types it has no specialised kernel for keep the entry of the table it starts from (the next ISA
// down), so every table covers every supported type.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_QUANT_VECDOTTABLES_H
#define TPC_RUNTIME_CPU_QUANT_VECDOTTABLES_H

#include "runtime/cpu/quant/Quant.h"

namespace tpc::rt::cpu {

/// Dot kernels by type id.
struct VecDotTable {
  static constexpr uint32_t kSize = 40;
  VecDotFn fns[kSize] = {};
  VecDot4Fn fns4[kSize] = {};
  QuantizeFn quant[kSize] = {};
  /// Installs a fast quantizer for activation type `t`.
  void setQuantize(GGMLType t, QuantizeFn f) { quant[static_cast<uint32_t>(t)] = f; }
  /// The fast quantizer for `t`, or nullptr.
  QuantizeFn getQuantize(GGMLType t) const {
    uint32_t i = static_cast<uint32_t>(t);
    return i < kSize ? quant[i] : nullptr;
  }
  /// Installs the kernel for `t`.
  void set(GGMLType t, VecDotFn f) { fns[static_cast<uint32_t>(t)] = f; }
  /// Installs the four-token kernel for `t`.
  void set4(GGMLType t, VecDot4Fn f) { fns4[static_cast<uint32_t>(t)] = f; }
  /// The four-token kernel for `t`, or nullptr.
  VecDot4Fn get4(GGMLType t) const {
    uint32_t i = static_cast<uint32_t>(t);
    return i < kSize ? fns4[i] : nullptr;
  }
  /// The kernel for `t`, or nullptr.
  VecDotFn get(GGMLType t) const {
    uint32_t i = static_cast<uint32_t>(t);
    return i < kSize ? fns[i] : nullptr;
  }
};

/// The portable kernels.
VecDotTable scalarVecDotTable();
/// AVX2 + FMA + F16C kernels over `base`. Call only when isaAvailable(Isa::AVX2).
VecDotTable avx2VecDotTable(const VecDotTable &base);
/// AVX-512 (F, BW, VL, VNNI) kernels over `base`. Call only when isaAvailable(Isa::AVX512).
VecDotTable avx512VecDotTable(const VecDotTable &base);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_QUANT_VECDOTTABLES_H
