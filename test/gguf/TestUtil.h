//===- TestUtil.h - helpers shared by the GGUF tests --------------*- C++ -*-===//
//
// Paths of the source tree and the shared fixtures, and a small file builder on top of GGUFWriter.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_GGUF_TESTUTIL_H
#define TPC_TEST_GGUF_TESTUTIL_H

#include "compiler/gguf/GGUFFile.h"
#include "compiler/gguf/GGUFWriter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tpc::gguf::test {

/// The fixtures folder, or "" when TPC_SHARED_DIR is unset or has no fixtures.
inline std::string fixturesDir() {
  const char *shared = std::getenv("TPC_SHARED_DIR");
  if (!shared || !*shared)
    return "";
  std::string dir = std::string(shared) + "/fixtures";
  std::ifstream probe(dir + "/README.md");
  return probe ? dir : "";
}

/// Reads a whole file.
inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Parses bytes produced by a writer; fails the test on error.
inline std::unique_ptr<GGUFFile> parseOrFail(const std::vector<uint8_t> &bytes,
                                             const char *name = "test.gguf") {
  Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::openBuffer(bytes.data(), bytes.size(), name);
  EXPECT_TRUE(f) << f.message();
  return f ? f.take() : nullptr;
}

} // namespace tpc::gguf::test

#endif // TPC_TEST_GGUF_TESTUTIL_H
