//===- HostArena.cpp - anonymous host memory for a CPU session's arenas ----===//
#include "runtime/cpu/HostArena.h"

#include <fstream>
#include <sys/mman.h>
#include <unistd.h>

namespace tpc::rt::cpu {

bool hugePagesUsable(const std::string &enabledFile) {
  std::ifstream in(enabledFile);
  std::string modes;
  if (!in || !std::getline(in, modes))
    return false;
  // The selected mode is bracketed: "always [madvise] never".
  return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
}

HostArena::HostArena(HostArena &&o) noexcept
    : data(o.data), size(o.size), map_(o.map_), mapped_(o.mapped_), huge_(o.huge_) {
  o.data = nullptr;
  o.map_ = nullptr;
}

HostArena::~HostArena() {
  if (map_)
    ::munmap(map_, mapped_);
}

bool HostArena::allocate(uint64_t bytes, bool huge) {
  size = bytes;
  huge_ = huge && bytes >= kHugePageBytes && hugePagesUsable();
  const uint64_t unit = huge_ ? kHugePageBytes : static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t span = bytes ? (bytes + unit - 1) / unit * unit : unit;
  if (span < bytes || span + unit < span)
    return false;
  // A huge arena maps one extra huge page and starts at the first 2 MiB boundary inside: the kernel backs
  // only aligned 2 MiB ranges with huge pages. The slack before and after is unmapped again.
  const uint64_t reserve = huge_ ? span + unit : span;
  void *p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return false;
  uint8_t *base = static_cast<uint8_t *>(p);
  if (huge_) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(base);
    uint8_t *aligned = base + ((unit - at % unit) % unit);
    if (aligned > base)
      ::munmap(base, static_cast<size_t>(aligned - base));
    if (uint8_t *end = aligned + span; end < base + reserve)
      ::munmap(end, static_cast<size_t>(base + reserve - end));
    base = aligned;
    ::madvise(base, span, MADV_HUGEPAGE); // advice only: 4 KiB pages where the kernel has no huge page free
  }
  map_ = base;
  mapped_ = span;
  data = base;
  return true;
}

} // namespace tpc::rt::cpu
