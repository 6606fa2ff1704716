//===- WeightSourceTest.cpp - copying weight slices and releasing their file pages ---===//
//
// A rank of a multi-process run copies its slices (rows strided over most of the GGUF) and then drops the
// file pages it read (exec::releaseCopiedPages), so the mapping does not add them to its peak RSS. Here on
// a 16 MiB temporary file mapped as openWeightSource maps a GGUF: the strided copy is right, the process's
// file-backed RSS falls by the pages released, a copy after the release reads the same bytes again (the
// pages come back from the page cache), and weights in the caller's memory (SessionOptions::ggufData) are
// never released (MADV_DONTNEED would zero anonymous memory). After the copies a session keeps only the
// pages of the slices it reads in place (exec::releasePagesOutside): every other page of the mapping leaves
// the process, and later faults inside a kept span do not map the gap's pages around them (the /proc/self/
// pagemap present bit says which pages the process maps). Contiguous rows are read with pread, in any ranges,
// without faulting the mapping.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Setup.h"
#include "runtime/plan/PlanIO.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;

namespace {

/// RssFile of this process in KiB (/proc/self/status), -1 when unknown.
long rssFileKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssFile:", 0) == 0)
      return std::stol(line.substr(8));
  return -1;
}

/// Rows of 4 KiB with 1 KiB of each copied: the strided reads of a slice split along the row.
WeightSlice stridedSlice(uint64_t rows) {
  WeightSlice w;
  w.name = "blk.0.ffn_down.weight";
  w.pieces.push_back(WeightPiece{/*fileOffset=*/1024, /*rowStride=*/4096, /*rowBytes=*/1024, rows});
  w.bytes = rows * 1024;
  return w;
}

uint8_t byteAt(uint64_t i) { return static_cast<uint8_t>((i * 131 + i / 4096) & 0xff); }

/// A temporary file of `size` bytes of byteAt(), named by `tag` and the process id; returns its path.
std::string writeByteFile(const std::string &tag, uint64_t size) {
  const std::string path = ::testing::TempDir() + tag + std::to_string(::getpid());
  std::vector<uint8_t> bytes(size);
  for (uint64_t i = 0; i < size; ++i)
    bytes[i] = byteAt(i);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), size);
  return path;
}

/// A 16 MiB temporary file of byteAt() mapped as openWeightSource maps a GGUF (the file is removed at once;
/// the mapping keeps it).
exec::WeightSource mappedFile(uint64_t size) {
  const std::string path = writeByteFile("tpc-weight-source-", size);
  exec::WeightSource src;
  const int fd = ::open(path.c_str(), O_RDONLY);
  void *addr = fd < 0 ? MAP_FAILED : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (fd >= 0)
    ::close(fd);
  std::remove(path.c_str());
  if (addr == MAP_FAILED)
    return src;
  src.data = static_cast<const uint8_t *>(addr);
  src.size = size;
  src.mapping = std::shared_ptr<const void>(addr, [size](const void *p) { ::munmap(const_cast<void *>(p), size); });
  return src;
}

/// Minor page faults of this process so far.
long minorFaults() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST(WeightSource, ContiguousRowsAreReadFromTheFileInAnyRangesWithoutFaults) {
  constexpr uint64_t kRows = 4096, kSize = kRows * 4096; // 16 MiB
  const std::string path = writeByteFile("tpc-weight-pread-", kSize);
  Plan plan;
  plan.ggufPath = path;
  plan.ggufSize = kSize;
  auto fp = ggufFingerprint(path);
  ASSERT_TRUE(fp) << fp.message();
  plan.ggufFingerprint = *fp;
  auto src = exec::openWeightSource(plan, SessionOptions{});
  std::remove(path.c_str());
  ASSERT_TRUE(src) << src.message();
  ASSERT_TRUE(src->file) << "openWeightSource keeps the mapped file open for pread";
  // A contiguous run of 4000 rows of 4 KiB from offset 64, copied in three uneven ranges (as open's threads
  // claim them), reads the file's bytes and faults no page of the mapping.
  const WeightPiece run{/*fileOffset=*/64, /*rowStride=*/4096, /*rowBytes=*/4096, 4000};
  std::vector<uint8_t> dst(run.rows * run.rowBytes, 0);
  const long faults = minorFaults();
  for (auto [r0, r1] : {std::pair<uint64_t, uint64_t>{0, 1}, {1, 2500}, {2500, 4000}})
    exec::copyWeightRowsReleasing(run, r0, r1, *src, dst.data() + r0 * run.rowBytes);
  EXPECT_LT(minorFaults() - faults, 32) << "pread faults no page of the mapping (the mapping's copy: ~256)";
  for (uint64_t i : {uint64_t(0), uint64_t(4095), uint64_t(4096), uint64_t(9999999), dst.size() - 1})
    ASSERT_EQ(dst[i], byteAt(64 + i)) << "byte " << i;
  // Strided rows go through the mapping: the same bytes as the plain copy.
  const WeightSlice w = stridedSlice(kRows - 1);
  std::vector<uint8_t> strided(w.bytes), plain(w.bytes);
  exec::copyWeightRowsReleasing(w.pieces[0], 0, 7, *src, strided.data());
  exec::copyWeightRowsReleasing(w.pieces[0], 7, kRows - 1, *src, strided.data() + 7 * 1024);
  exec::copyWeightSlice(w, src->data, plain.data());
  EXPECT_EQ(strided, plain);
}

/// Whether this process maps page `i` of `src` (bit 63 of its /proc/self/pagemap entry); nullopt when
/// pagemap cannot be read.
std::optional<bool> mapped(const exec::WeightSource &src, uint64_t i) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0)
    return std::nullopt;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>((reinterpret_cast<uintptr_t>(src.data) / page + i) * 8);
  const bool ok = ::pread(fd, &entry, 8, at) == 8;
  ::close(fd);
  return ok ? std::optional<bool>((entry >> 63) & 1) : std::nullopt;
}

TEST(WeightSource, ReleasedFilePagesLeaveRssAndReadBackTheSame) {
  constexpr uint64_t kRows = 4096, kSize = kRows * 4096; // 16 MiB
  const std::string path = writeByteFile("tpc-weight-source-", kSize);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void *addr = ::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  std::remove(path.c_str());
  ASSERT_NE(addr, MAP_FAILED);
  exec::WeightSource src;
  src.data = static_cast<const uint8_t *>(addr);
  src.size = kSize;
  src.mapping = std::shared_ptr<const void>(addr, [](const void *p) { ::munmap(const_cast<void *>(p), kSize); });

  const WeightSlice w = stridedSlice(kRows - 1); // the last row would run past the file
  std::vector<uint8_t> first(w.bytes), again(w.bytes);
  const long before = rssFileKiB();
  exec::copyWeightSlice(w, src.data, first.data());
  const long touched = rssFileKiB();
  for (uint64_t r = 0; r < 3; ++r)
    for (uint64_t b : {uint64_t(0), uint64_t(1023)})
      ASSERT_EQ(first[r * 1024 + b], byteAt(1024 + r * 4096 + b)) << "row " << r << " byte " << b;
  exec::releaseCopiedPages(w, src);
  const long released = rssFileKiB();
  if (before < 0)
    GTEST_SKIP() << "no RssFile in /proc/self/status";
  EXPECT_GE(touched - before, 12 * 1024) << "the strided copy makes most of the 16 MiB resident";
  EXPECT_GE(touched - released, 12 * 1024) << "releasing the slice drops those pages again";
  exec::copyWeightSlice(w, src.data, again.data());
  EXPECT_EQ(first, again) << "a released page reads the same bytes back from the page cache";
  // The copy that releases as it goes gives the same bytes and leaves none of the slice's pages behind.
  std::vector<uint8_t> third(w.bytes);
  const long resident = rssFileKiB();
  exec::copyWeightRowsReleasing(w.pieces[0], 0, w.pieces[0].rows, src, third.data());
  EXPECT_EQ(first, third);
  EXPECT_LE(rssFileKiB() - std::min(resident, released), 256) << "copyWeightRowsReleasing left pages resident";
}

TEST(WeightSource, CallersMemoryIsNeverReleased) {
  std::vector<uint8_t> bytes(size_t(1) << 20);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = byteAt(i) | 1; // no zero byte: a dropped anonymous page would read as zeros
  exec::WeightSource src;
  src.data = bytes.data(); // SessionOptions::ggufData: no mapping of openWeightSource's
  const WeightSlice w = stridedSlice(255);
  std::vector<uint8_t> first(w.bytes), again(w.bytes);
  exec::copyWeightSlice(w, src.data, first.data());
  exec::releaseCopiedPages(w, src);
  exec::copyWeightSlice(w, src.data, again.data());
  EXPECT_EQ(first, again);
  EXPECT_EQ(std::count(again.begin(), again.end(), 0), 0);
}

TEST(WeightSource, OnlyTheKeptSpansPagesStayMapped) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), kPages = 4096;
  exec::WeightSource src = mappedFile(kPages * page);
  ASSERT_TRUE(src.mapping) << "cannot map a temporary file";
  volatile unsigned sum = 0; // the reads must happen
  for (uint64_t i = 0; i < kPages; ++i)
    sum += src.data[i * page]; // every page mapped, as a strided copy leaves them
  if (!mapped(src, 0) || !*mapped(src, 0))
    GTEST_SKIP() << "/proc/self/pagemap does not show this process's pages";
  // Two spans a session reads in place, neither page-aligned: [100.5, 300.5) and [1000, 1100) pages.
  const std::vector<std::pair<uint64_t, uint64_t>> keep = {{1000 * page, 1100 * page},
                                                           {100 * page + page / 2, 300 * page + page / 2}};
  const uint64_t released = exec::releasePagesOutside(keep, src);
  EXPECT_EQ(released, (kPages - 201 - 100) * page) << "every page no span touches, and only those";
  // Reads of the spans afterwards (every call reads its in-place slices): the kernel maps pages around each
  // fault (or a whole 2 MiB folio, where the file's page cache holds one; the release may have unmapped a
  // span's pages with the folio), but never across into a released gap.
  for (auto [lo, hi] : keep)
    for (uint64_t at = lo; at < hi; at += page / 2)
      sum += src.data[at];
  for (uint64_t i : {uint64_t(0), uint64_t(99), uint64_t(301), uint64_t(511), uint64_t(512), uint64_t(999),
                     uint64_t(1100), kPages - 1})
    EXPECT_FALSE(*mapped(src, i)) << "page " << i << " lies outside every span";
  for (uint64_t i : {uint64_t(100), uint64_t(200), uint64_t(300), uint64_t(1000), uint64_t(1099)})
    EXPECT_TRUE(*mapped(src, i)) << "page " << i << " holds a kept span's bytes";
  EXPECT_EQ(src.data[150 * page + 7], byteAt(150 * page + 7)) << "kept bytes read the same";
}

} // namespace
