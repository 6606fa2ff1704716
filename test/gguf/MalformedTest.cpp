//===- MalformedTest.cpp - the malformed-GGUF corpus ------------------------===//
//
// test/gguf/malformed/cases.txt lists each hand-built malformed file (generate.py) with a substring of
// the error it must produce. Each file is opened through the mmap path; the error must be one line that
// names the file and contains the substring, and no two cases may share a substring (so each check is
// specific). A crash here fails the whole binary, which is the point.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <set>
#include <sstream>

using namespace tpc::gguf;

namespace {
struct Case {
  std::string file, expected;
};

/// Shows the file name, not the struct's bytes, in test names and failures.
[[maybe_unused]] void PrintTo(const Case &c, std::ostream *os) { *os << c.file; }

std::string corpusDir() { return std::string(TPC_SOURCE_DIR) + "/test/gguf/malformed"; }

std::vector<Case> loadCases() {
  std::vector<Case> cases;
  std::ifstream in(corpusDir() + "/cases.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos)
      continue;
    cases.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return cases;
}
} // namespace

TEST(GGUFMalformed, ManifestHasEnoughDistinctCases) {
  std::vector<Case> cases = loadCases();
  EXPECT_GE(cases.size(), 24u);
  std::set<std::string> files, subs;
  for (const Case &c : cases) {
    EXPECT_TRUE(files.insert(c.file).second) << c.file;
    EXPECT_TRUE(subs.insert(c.expected).second) << "shared substring: " << c.expected;
  }
  for (const Case &a : cases)
    for (const Case &b : cases)
      if (a.file != b.file)
        EXPECT_EQ(b.expected.find(a.expected), std::string::npos)
            << a.file << "'s substring also matches " << b.file << "'s";
}

class GGUFMalformedFile : public ::testing::TestWithParam<Case> {};

TEST_P(GGUFMalformedFile, GivesItsSpecificError) {
  const Case &c = GetParam();
  std::string path = corpusDir() + "/" + c.file;
  Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::open(path);
  ASSERT_FALSE(f) << c.file << " parsed without error";
  const std::string &e = f.message();
  EXPECT_NE(e.find(c.expected), std::string::npos) << "expected '" << c.expected << "' in: " << e;
  EXPECT_EQ(e.rfind(path + ": ", 0), 0u) << "error must start with the path: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // No other case's substring matches this error, so each message is specific to its defect.
  for (const Case &other : loadCases())
    if (other.file != c.file)
      EXPECT_EQ(e.find(other.expected), std::string::npos) << c.file << " also matches " << other.file;
  // The in-memory entry gives the same verdict.
  std::vector<uint8_t> bytes = test::readBytes(path);
  Expected<std::unique_ptr<GGUFFile>> b = GGUFFile::openBuffer(bytes.data(), bytes.size(), c.file);
  ASSERT_FALSE(b);
  if (!bytes.empty())
    EXPECT_NE(b.message().find(c.expected), std::string::npos) << b.message();
}

INSTANTIATE_TEST_SUITE_P(Corpus, GGUFMalformedFile, ::testing::ValuesIn(loadCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string n = info.param.file.substr(0, info.param.file.find('.'));
                           for (char &ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return n;
                         });

TEST(GGUFMalformed, DemoModelIsValid) {
  std::string path = std::string(TPC_SOURCE_DIR) + "/examples/models/tiny-demo.gguf";
  Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::open(path);
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ(*(*f)->getString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->getU32("llama.block_count"), 1u);
  EXPECT_EQ((*f)->tensors().size(), 12u);
  EXPECT_EQ((*f)->findTensor("blk.0.attn_k.weight")->ne, (std::vector<uint64_t>{32, 16}));
  EXPECT_EQ((*f)->getStringArray("tokenizer.ggml.tokens")->size(), 16u);
}
