//===- PreTokenizerOracleTest.cpp - pre-tokenizers against a regex engine ---===//
//
// The hand-written gpt2, llama3, qwen2, qwen35 and default pre-tokenizer matchers must split exactly as the
// real regexes do. PreTokenizerCases.inc holds strings (fixed tricky ones plus random mixes of letters,
// digits, apostrophes, CR/LF, Unicode spaces, marks and emoji, and combining-mark cases where qwen35's
// \p{M} matters) with the pieces the Python `regex` module produced; regenerate with
// gen-pretokenizer-cases.py.
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

namespace {

/// One oracle case: pre-tokenizer name, text, expected pieces.
struct PreCase {
  const char *pre;
  const char *text;
  std::vector<std::string> pieces;
};

#include "test/runtime/tokenizer/PreTokenizerCases.inc"

TEST(PreTokenizerOracle, MatchesRegexEngine) {
  size_t n = 0;
  for (const PreCase &c : kPreCases) {
    EXPECT_EQ(tpc::rt::unicode::preTokenize(c.text, c.pre), c.pieces) << c.pre << ": '" << c.text << "'";
    ++n;
  }
  EXPECT_EQ(n, 5u * (32u + 12u)); // 5 pre-tokenizers x (7 fixed + 25 random + 12 combining-mark cases)
}

} // namespace
