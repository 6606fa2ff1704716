//===- HostArena.h - anonymous host memory for a CPU session's arenas -*- C++ -*-===//
//
// Arenas are anonymous mmaps: zero pages the kernel supplies on first touch, so open() clears nothing and an
// arena costs only the pages the calls write. Weights and KV caches can ask for 2 MiB transparent huge pages:
// decode streams every weight once per token, and on 4 KiB pages the hardware prefetchers stop at every page
// boundary and every page costs a TLB walk (Gemma 3 270M decode +7%, +14% at a 4096-token depth; measured
// in docs/performance.md).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_HOSTARENA_H
#define TPC_RUNTIME_CPU_HOSTARENA_H

#include <cstdint>
#include <string>

namespace tpc::rt::cpu {

/// Whether regions advised MADV_HUGEPAGE get transparent huge pages: the mode in `enabledFile` (Linux:
/// /sys/kernel/mm/transparent_hugepage/enabled, e.g. "always [madvise] never") is `always` or `madvise`.
/// False where the file is missing or unreadable (not Linux, a container without /sys) or says `never`.
bool hugePagesUsable(const std::string &enabledFile = "/sys/kernel/mm/transparent_hugepage/enabled");

/// The size of a transparent huge page.
inline constexpr uint64_t kHugePageBytes = uint64_t(2) << 20;

/// One anonymous mapping. With `huge` (and hugePagesUsable()), an arena of at least one huge page starts on a
/// 2 MiB boundary, spans whole huge pages and is advised MADV_HUGEPAGE, so the kernel backs it with 2 MiB
/// pages on first touch; otherwise 4 KiB pages.
class HostArena {
public:
  HostArena() = default;
  HostArena(HostArena &&o) noexcept;
  HostArena &operator=(const HostArena &) = delete;
  ~HostArena();

  /// Maps `bytes` (a real address even for 0 bytes); false when the mapping fails.
  bool allocate(uint64_t bytes, bool huge = false);
  /// Whether the arena was advised onto huge pages.
  bool huge() const { return huge_; }

  uint8_t *data = nullptr;
  uint64_t size = 0;

private:
  void *map_ = nullptr; ///< the mapping (data may lie past its start: the 2 MiB alignment)
  uint64_t mapped_ = 0;
  bool huge_ = false;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_HOSTARENA_H
