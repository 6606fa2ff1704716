//===- HostArenaTest.cpp - anonymous arenas on 4 KiB or 2 MiB pages ---------===//
//
// The transparent-huge-page mode is read from the kernel's file (any file here), and an arena that asks for
// huge pages starts on a 2 MiB boundary and is advised onto them: the kernel's smaps entry for it says
// THPeligible, which it does not for a 4 KiB arena.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/HostArena.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace tpc::rt::cpu;

namespace {

std::string writeTemp(const std::string &text) {
  std::string path = ::testing::TempDir() + "thp-enabled-" + std::to_string(::getpid());
  std::ofstream(path) << text;
  return path;
}

/// The THPeligible value of the smaps entry whose range holds p, or -1 (no such entry or line).
int thpEligible(const void *p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0)
      return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(HostArena, TheSelectedModeDecidesWhetherHugePagesAreUsable) {
  const std::pair<const char *, bool> cases[] = {{"always [madvise] never\n", true},
                                                 {"[always] madvise never\n", true},
                                                 {"always madvise [never]\n", false},
                                                 {"", false}};
  for (const auto &[text, usable] : cases) {
    const std::string path = writeTemp(text);
    EXPECT_EQ(hugePagesUsable(path), usable) << text;
    std::remove(path.c_str());
  }
  EXPECT_FALSE(hugePagesUsable("/no/such/dir/enabled"));
}

TEST(HostArena, AHugeArenaIsAlignedAndAdvisedAndZero) {
  const uint64_t bytes = 3 * kHugePageBytes + 12345;
  HostArena huge, small, tiny;
  ASSERT_TRUE(huge.allocate(bytes, true));
  ASSERT_TRUE(small.allocate(bytes, false));
  ASSERT_TRUE(tiny.allocate(kHugePageBytes - 1, true));
  EXPECT_EQ(huge.size, bytes);
  EXPECT_FALSE(small.huge());
  EXPECT_FALSE(tiny.huge()) << "less than one huge page stays on 4 KiB pages";
  // Zero pages on first touch, and every byte writable (the last one past the whole huge pages too).
  for (HostArena *a : {&huge, &small}) {
    EXPECT_EQ(a->data[0], 0);
    EXPECT_EQ(a->data[bytes - 1], 0);
    a->data[0] = 1;
    a->data[bytes - 1] = 2;
  }
  if (!hugePagesUsable()) {
    EXPECT_FALSE(huge.huge());
    GTEST_SKIP() << "this kernel offers no transparent huge pages (mode never or no /sys): 4 KiB arenas only";
  }
  EXPECT_TRUE(huge.huge());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(huge.data) % kHugePageBytes, 0u);
  EXPECT_EQ(thpEligible(huge.data), 1);
  EXPECT_EQ(thpEligible(huge.data + bytes - 1), 1);
  EXPECT_EQ(thpEligible(small.data), 0);
}

TEST(HostArena, MovingKeepsOneOwner) {
  HostArena a;
  ASSERT_TRUE(a.allocate(2 * kHugePageBytes, true));
  a.data[5] = 7;
  HostArena b(std::move(a));
  EXPECT_EQ(a.data, nullptr);
  EXPECT_EQ(b.data[5], 7);
}

} // namespace
