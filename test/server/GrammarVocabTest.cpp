//===- GrammarVocabTest.cpp - token masks on real vocabularies --------------===//
//
// The mask (a walk of the vocabulary trie) must equal the per-token check for every token of a real
// vocabulary ($TPC_SHARED_DIR/tokenizer-tests: gpt-2's byte-level BPE, llama's SentencePiece with byte
// tokens, qwen3.5's 248k tokens), at several states of a JSON schema grammar: start, inside keys, inside a
// string after a multi-byte character, in arrays, after the last value. The states are reached by feeding
// the text with the longest token the grammar accepts at each point. (Optional keys come by name: kind before
// ok.)
//===----------------------------------------------------------------------===//
#include "server/grammar/JsonSchema.h"
#include "server/grammar/Matcher.h"

#include "compiler/gguf/GGUFFile.h"
#include "compiler/tokenizer/GGUFTokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace tpc;
using namespace tpc::server::grammar;
using json = nlohmann::json;

namespace {

std::string sharedDir() {
  const char *d = std::getenv("TPC_SHARED_DIR");
  return d && std::ifstream(std::string(d) + "/tokenizer-tests/README.md") ? d : "";
}

std::unique_ptr<rt::Tokenizer> load(const std::string &file) {
  auto f = gguf::GGUFFile::open(sharedDir() + "/tokenizer-tests/" + file);
  if (!f) {
    ADD_FAILURE() << f.message();
    return nullptr;
  }
  auto d = tokenizerFromGGUF(**f);
  if (!d) {
    ADD_FAILURE() << d.message();
    return nullptr;
  }
  return std::make_unique<rt::Tokenizer>(d.take());
}

/// Feeds `text` with the longest accepted token at each point; false when no token fits.
bool feed(Matcher &m, const Vocabulary &v, const std::string &text) {
  for (size_t at = 0; at < text.size();) {
    int32_t best = -1;
    size_t bestLen = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string_view b = v.bytes(static_cast<int32_t>(i));
      if (b.size() > bestLen && text.compare(at, b.size(), b) == 0 && m.accepts(static_cast<int32_t>(i)))
        best = static_cast<int32_t>(i), bestLen = b.size();
    }
    if (best < 0 || !m.accept(best))
      return false;
    at += bestLen;
  }
  return true;
}

void checkVocabulary(const std::string &file) {
  auto tok = load(file);
  ASSERT_TRUE(tok);
  const auto t0 = std::chrono::steady_clock::now();
  Vocabulary v(*tok);
  std::printf("%s: vocabulary bytes and trie (%zu nodes) built in %.0f ms\n", file.c_str(), v.nodes().size(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  auto rules = jsonSchemaToGbnf(json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "n": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
      "ok": {"type": "boolean"}, "kind": {"enum": ["alpha", "beta"]}}, "required": ["name", "n"]})"),
                                "root");
  ASSERT_TRUE(rules) << rules.message();
  auto g = parseGbnf(*rules);
  ASSERT_TRUE(g) << g.message();
  const std::string full = "{\"name\": \"caf\xC3\xA9 x\", \"n\": [1, 23], \"kind\": \"beta\", \"ok\": true}";
  // Prefix lengths: start, in a key, in a string (after the é), in the array, after a value, complete.
  for (size_t len : {size_t(0), size_t(1), size_t(4), size_t(14), size_t(16), size_t(28), size_t(33),
                     size_t(44), size_t(58), full.size() - 1, full.size()}) {
    Matcher m(*g, v, {}, true);
    ASSERT_TRUE(feed(m, v, full.substr(0, len))) << file << ": cannot feed " << full.substr(0, len);
    std::vector<int32_t> mask, each;
    m.allowed(mask);
    for (size_t i = 0; i < v.size(); ++i)
      if (m.accepts(static_cast<int32_t>(i)))
        each.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(mask, each) << file << " after " << full.substr(0, len);
    EXPECT_FALSE(mask.empty()) << file << " after " << full.substr(0, len);
    // Informative (not asserted: the machine is shared): the mask's cost at this state.
    const double first = m.stats().maskSeconds;
    m.allowed(mask); // again, with the states the first walk built
    std::printf("%s: %zu of %zu tokens allowed after %zu bytes, mask %.0f us (again: %.0f us)\n",
                file.c_str(), mask.size(), v.size(), len, first * 1e6, (m.stats().maskSeconds - first) * 1e6);
    if (len == full.size())
      EXPECT_TRUE(m.mustEnd());
    else
      EXPECT_FALSE(m.canEnd());
  }
}

} // namespace

TEST(GrammarVocab, MaskEqualsPerTokenCheck) {
  if (sharedDir().empty())
    GTEST_SKIP() << "TPC_SHARED_DIR is not set or lacks tokenizer-tests/ (set it to the shared folder)";
  for (const char *file : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen35.gguf"})
    checkVocabulary(file);
}
