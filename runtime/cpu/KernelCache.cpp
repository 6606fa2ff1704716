//===- KernelCache.cpp - the file that remembers calibrated kernel levels ----===//
//
// Reading and writing the file KernelCache.h describes, and the two parts of its key that describe the
// machine and the build (the CPU model string, the ELF build id).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/KernelCache.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <link.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace tpc::rt::cpu {
namespace {
constexpr const char *kHeader = "# tpc cpu kernel levels v1";

/// `s` with tabs and newlines as spaces, so it fits in one field.
std::string field(std::string s) {
  for (char &c : s)
    if (c == '\t' || c == '\n' || c == '\r')
      c = ' ';
  return s;
}

std::vector<std::string> splitTabs(const std::string &line) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    const size_t tab = line.find('\t', from);
    out.push_back(line.substr(from, tab == std::string::npos ? std::string::npos : tab - from));
    if (tab == std::string::npos)
      return out;
    from = tab + 1;
  }
}

std::optional<Isa> isaByName(const std::string &name) {
  for (Isa i : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    if (name == isaName(i))
      return i;
  return std::nullopt;
}

/// dl_iterate_phdr's callback: the NT_GNU_BUILD_ID note of the object that holds `want`.
struct BuildIdSearch {
  uintptr_t want = 0;
  std::string id;
};
int findBuildId(dl_phdr_info *info, size_t, void *data) {
  auto *s = static_cast<BuildIdSearch *>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && !holds; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    holds = ph.p_type == PT_LOAD && s->want >= lo && s->want < lo + ph.p_memsz;
  }
  if (!holds)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE)
      continue;
    const auto *p = reinterpret_cast<const uint8_t *>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t *end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto *n = reinterpret_cast<const ElfW(Nhdr) *>(p);
      const uint8_t *name = p + sizeof(ElfW(Nhdr));
      const uint8_t *desc = name + ((n->n_namesz + 3) & ~3u);
      if (desc + n->n_descsz > end)
        break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        static const char hex[] = "0123456789abcdef";
        for (uint32_t j = 0; j < n->n_descsz; ++j)
          s->id += {hex[desc[j] >> 4], hex[desc[j] & 15]};
        return 1;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 1; // the right object, without a build id
}
} // namespace

std::string kernelCachePath() {
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') // the XDG spec: a relative value is invalid and ignored
    return std::string(xdg) + "/tpc/cpu-kernels.txt";
  const char *home = std::getenv("HOME");
  if (home && *home)
    return std::string(home) + "/.cache/tpc/cpu-kernels.txt";
  return {};
}

KernelCacheRead readKernelCache(const std::string &path, const KernelCacheKey &key) {
  KernelCacheRead r;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return r; // none yet (or a path that cannot hold one: writing it says so)
  std::ifstream in(path);
  if (!in || std::filesystem::is_directory(path, ec)) {
    r.problem =
        "cannot read the CPU kernel cache " + path + " (" +
        (std::filesystem::is_directory(path, ec) ? std::string("a directory") : std::strerror(errno)) +
        "): calibrating, then rewriting it";
    return r;
  }
  auto corrupt = [&](size_t lineNo, const std::string &what) {
    r.entries.clear();
    r.hit.reset();
    r.problem = "ignoring the CPU kernel cache " + path + ": line " + std::to_string(lineNo) + " " + what +
                "; it will be rewritten (delete the file if this repeats)";
    return r;
  };
  std::string line;
  size_t lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (lineNo == 1) {
      if (line != kHeader)
        return corrupt(1, "is not the header \"" + std::string(kHeader) + "\"");
      continue;
    }
    const std::vector<std::string> f = splitTabs(line);
    if (f.size() != 5)
      return corrupt(lineNo, "has " + std::to_string(f.size()) + " tab-separated fields, not 5");
    const std::optional<Isa> isa = isaByName(f[3]);
    if (!isa)
      return corrupt(lineNo, "names the level \"" + f[3] + "\", not one of scalar, avx2, avx512, avx512vnni");
    KernelCacheEntry e{{f[0], f[1], f[2]}, *isa, f[4]};
    if (e.key == key) {
      if (!isaAvailable(*isa)) // same CPU model string, features hidden: never run what the CPU lacks
        return corrupt(lineNo, std::string("names ") + f[3] + ", which this CPU cannot run");
      r.hit = e;
    }
    r.entries.push_back(std::move(e));
  }
  if (lineNo == 0)
    return corrupt(1, "is missing (an empty file)");
  return r;
}

std::string writeKernelCache(const std::string &path, std::vector<KernelCacheEntry> entries,
                             const KernelCacheEntry &entry) {
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [&](const KernelCacheEntry &e) { return e.key == entry.key; }),
                entries.end());
  entries.push_back(entry);
  if (entries.size() > kKernelCacheEntries)
    entries.erase(entries.begin(), entries.end() - kKernelCacheEntries);
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path())
    std::filesystem::create_directories(p.parent_path(), ec);
  if (ec)
    return "cannot create " + p.parent_path().string() + " for the CPU kernel cache (" + ec.message() +
           "): the calibration runs again next time (TPC_CPU_CALIBRATE=0 turns it off)";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kHeader << '\n';
    for (const KernelCacheEntry &e : entries)
      out << field(e.key.cpu) << '\t' << field(e.key.build) << '\t' << field(e.key.shapes) << '\t'
          << isaName(e.isa) << '\t' << field(e.note) << '\n';
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::filesystem::remove(tmp, ec);
      return "cannot write the CPU kernel cache " + path + " (" + why +
             "): the calibration runs again next time (TPC_CPU_CALIBRATE=0 turns it off)";
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return "cannot replace the CPU kernel cache " + path + " (" + ec.message() +
           "): the calibration runs again next time (TPC_CPU_CALIBRATE=0 turns it off)";
  }
  return {};
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(' '));
        if (!v.empty())
          return field(v);
      }
    }
  return "unknown CPU";
}

std::string kernelBuildId() {
  BuildIdSearch s;
  s.want = reinterpret_cast<uintptr_t>(&kernelBuildId);
  dl_iterate_phdr(findBuildId, &s);
  if (!s.id.empty())
    return s.id;
  struct stat st {};
  if (::stat("/proc/self/exe", &st) == 0)
    return "exe-" + std::to_string(st.st_size) + "-" + std::to_string(st.st_mtime);
  return "unknown";
}

} // namespace tpc::rt::cpu
