//===- ActivationCache.h - activations converted once per input ---*- C++ -*-===//
//
// Several matmuls read the same input: Q, K and V read the attention norm's output, gate and up the FFN
// norm's, every expert of a MoE layer the same rows. The CPU backend converts such an input (to ActQ8 rows,
// or a legacy activation type) once and keeps the copy per device until something writes over the input:
// entries are keyed by (format, address, rows, row length, stride), and the session reports every step's
// written byte ranges (invalidate), so a stale copy is never read. Chosen over a plan-level "quantize" step
// because it needs no compiler change and also serves host-placed steps and hand-built plans; the cost is
// that the session must report every write (its step loop and collectives do; see CpuSession.cpp).
//
// Single-threaded: one cache per device, used by the thread that runs the device's steps. The conversion
// itself runs on the device's thread group.
//
// Usage:
//   const uint8_t *rows = cache.get(key, x, m, k, stride, rowBytes, [&](uint8_t *dst) { ...fill m rows... });
//   cache.invalidate(out.data, out.bytes());   // after a step wrote `out`
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_ACTIVATIONCACHE_H
#define TPC_RUNTIME_CPU_ACTIVATIONCACHE_H

#include "runtime/cpu/RopeTable.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tpc::rt::cpu {

/// Converted activation rows, kept until their source is written (see the file comment).
class ActivationCache {
public:
  /// The converted rows of x[0..m) (k floats each, `stride` floats apart) in format `key` (an opaque id of
  /// the conversion): the cached copy, or `fill(dst)` run into a new one of m * rowBytes bytes.
  const uint8_t *get(int key, const float *x, int64_t m, int64_t k, size_t stride, size_t rowBytes,
                     const std::function<void(uint8_t *)> &fill);
  /// Drops every copy whose source overlaps [p, p + bytes).
  void invalidate(const void *p, size_t bytes);
  /// Drops every copy.
  void clear();
  /// Conversions run (cache misses) since construction.
  uint64_t conversions() const { return conversions_; }
  /// Requests served from a copy (cache hits) since construction.
  uint64_t hits() const { return hits_; }
  /// The device's RoPE tables: also derived once from this call's inputs (positions), but matched by value,
  /// so writes need not be reported for them (RopeTable.h).
  RopeTables &ropeTables() { return rope_; }

private:
  struct Free {
    void operator()(uint8_t *p) const;
  };
  struct Entry {
    int key;
    const float *x;
    int64_t m, k;
    size_t stride;
    const uint8_t *lo, *hi; ///< the source's byte range
    std::unique_ptr<uint8_t, Free> data;
    size_t bytes;
  };
  /// At most this many copies (Q/K/V and gate/up need one each; a few more cover interleaved readers).
  static constexpr size_t kMaxEntries = 4;
  std::vector<Entry> entries_; ///< oldest first
  uint64_t conversions_ = 0, hits_ = 0;
  RopeTables rope_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_ACTIVATIONCACHE_H
