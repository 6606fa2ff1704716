//===- KernelCache.h - the file that remembers calibrated kernel levels -*- C++ -*-===//
//
// One small text file per user, $XDG_CACHE_HOME/tpc/cpu-kernels.txt (else ~/.cache/tpc/cpu-kernels.txt),
// written by the CPU backend's kernel choice (KernelChoice.h) so a calibration runs once per machine, build
// and plan shape set. Format (a line per entry, fields separated by tabs, newest last, at most
// kKernelCacheEntries):
//
//   # tpc cpu kernel levels v1                                   <- the first line, exactly
//   <cpu>\t<build>\t<shapes>\t<level>\t<note>                    <- an entry
//
//   cpu     the CPU model string and its best level ("Intel(R) Xeon(R) Processor|avx512vnni": a VM that
//           hides AVX-512 from the same model is another key)
//   build   the kernel build: the ELF build id of the binary holding the kernels (a rebuild changes it)
//   shapes  a hash of the decode shapes timed (another plan, or another device count, is another key)
//   level   scalar, avx2, avx512 or avx512vnni
//   note    free text: what the calibration measured (for people reading the file)
//
// The file is untrusted input like any other: a first line that is not the header, a line without five
// fields, a level that is not a name, or one this CPU cannot run makes the whole file "corrupt": the reader
// reports it (one line naming the file, what is wrong and that it will be rewritten) and finds nothing, and
// the next write replaces the file with the new entry alone. Writes go to a temporary file renamed over the
// old one, so concurrent processes (mpirun ranks on one host) never see half a file.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_KERNELCACHE_H
#define TPC_RUNTIME_CPU_KERNELCACHE_H

#include "runtime/cpu/quant/Quant.h"

#include <optional>
#include <string>
#include <vector>

namespace tpc::rt::cpu {

/// Most entries the file keeps (the oldest go first).
constexpr size_t kKernelCacheEntries = 64;

/// What an entry is keyed by (see the file comment). Fields hold no tabs or newlines (makeKey's callers
/// replace them).
struct KernelCacheKey {
  std::string cpu, build, shapes;
  bool operator==(const KernelCacheKey &o) const {
    return cpu == o.cpu && build == o.build && shapes == o.shapes;
  }
};

/// One entry of the file.
struct KernelCacheEntry {
  KernelCacheKey key;
  Isa isa = Isa::Scalar;
  std::string note;
};

/// What readKernelCache found.
struct KernelCacheRead {
  std::vector<KernelCacheEntry> entries; ///< every entry, in file order (empty when corrupt or absent)
  std::optional<KernelCacheEntry> hit;   ///< the entry of the key asked for, if any
  std::string problem; ///< "": the file is fine or absent; else one line saying why it is ignored
};

/// The cache file's path: $XDG_CACHE_HOME/tpc/cpu-kernels.txt, else $HOME/.cache/tpc/cpu-kernels.txt;
/// empty when neither variable is set (no cache then).
std::string kernelCachePath();

/// Reads `path` and looks up `key` (see the file comment for what makes it corrupt). A missing file is no
/// problem; an unreadable one is.
KernelCacheRead readKernelCache(const std::string &path, const KernelCacheKey &key);

/// Writes `entries` with `entry` replacing the one of its key (or appended), keeping the newest
/// kKernelCacheEntries, creating the directory; "" on success, else one line saying what failed.
std::string writeKernelCache(const std::string &path, std::vector<KernelCacheEntry> entries,
                             const KernelCacheEntry &entry);

/// The CPU model string (/proc/cpuinfo's "model name", else "unknown CPU"), tabs and newlines replaced.
std::string cpuModelName();

/// The build id of the binary that holds the kernels (the ELF note NT_GNU_BUILD_ID, in hex); else the
/// size and modification time of /proc/self/exe; else "unknown".
std::string kernelBuildId();

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_KERNELCACHE_H
