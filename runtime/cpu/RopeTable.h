//===- RopeTable.h - RoPE cos/sin per (position, frequency), kept per device -*- C++ -*-===//
//
// RoPE's cos/sin depend only on the positions and the parameter set (mode, n_dims, base, freq_scale,
// freq_factors), not on the layer or head: every ROPE step of one evaluate call with the same set (Q and K
// of every layer; Gemma 3 has two sets, local and global bases) can share one table. Tables are computed in
// double and rounded to float once, in the layout the row kernels read (Elementwise.h: c[j] and s[j] per
// element j < n_dims, s negated where the rotation subtracts), row ti for token ti.
//
// Kept tables are matched by value (positions, parameters and freq_factors compared element by element),
// not by address: a new evaluate call's positions in the same buffer rebuild the table, so nothing needs
// invalidating. The comparison is O(t + n_dims/2), the build O(t n_dims/2) cos/sin in double, which the old
// per-step loop paid on every ROPE step. Single-threaded like ActivationCache (one per device); the build
// runs on the device's thread group.
//
// Usage:
//   const RopeTable &tab = tables.get(params, pos, t, freqFactors, tg);
//   kernels.rope(neox, x, y, tab.cos(ti), tab.sin(ti), params.nDims);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_ROPETABLE_H
#define TPC_RUNTIME_CPU_ROPETABLE_H

#include "runtime/plan/StepParams.h"

#include <cstdint>
#include <vector>

namespace tpc::rt::cpu {

class ThreadGroup;

/// cos/sin of one parameter set at t positions (see the file comment for the layout).
struct RopeTable {
  RopeParams params;
  std::vector<int32_t> pos;
  std::vector<float> freqFactors; ///< empty when the step has none
  std::vector<float> c, s;        ///< [t, nDims]
  const float *cos(int64_t ti) const { return c.data() + ti * params.nDims; }
  const float *sin(int64_t ti) const { return s.data() + ti * params.nDims; }
  /// Fills c and s for params, pos and freqFactors (set first) on tg.
  void build(ThreadGroup &tg);
};

/// A few kept tables, matched by value (see the file comment).
class RopeTables {
public:
  /// The table of p at positions pos[0..t) with freqFactors (nDims/2 of them, or null): a kept one or a
  /// new one built on tg (evicting the oldest).
  const RopeTable &get(const RopeParams &p, const int32_t *pos, int64_t t, const float *freqFactors,
                       ThreadGroup &tg);
  /// Tables built (misses) since construction.
  uint64_t builds() const { return builds_; }

private:
  /// Q and K share one; Gemma's two bases, and a margin for interleaved sets.
  static constexpr size_t kMaxTables = 4;
  std::vector<RopeTable> tables_; ///< oldest first
  uint64_t builds_ = 0;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_ROPETABLE_H
