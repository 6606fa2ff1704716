//===- TokenizerTest.cpp - tokenizer tests on hand-built vocabularies ------===//
//
// Synthetic vocabularies small enough that the expected ids follow from the algorithm by hand: SPM
// merge order by score and leftmost ties, byte fallback, space prefix; byte-level BPE merges by rank and
// the pre-tokenizer regexes (qwen35's marks included); special-token partition; validation errors;
// streaming decode. These run everywhere (no /work/shared needed).
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

using namespace tpc::rt;

namespace {

/// An SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then `pieces` with the given scores.
TokenizerData spmVocab(const std::vector<std::pair<std::string, float>> &pieces) {
  TokenizerData d;
  d.model = "llama";
  applyModelDefaults(d);
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.tokenTypes = {2, 3, 3};
  d.unk = 0;
  d.bos = 1;
  d.eos = 2;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    d.tokens.push_back(buf);
    d.tokenTypes.push_back(6);
  }
  for (auto &[text, score] : pieces) {
    d.tokens.push_back(text);
    d.tokenTypes.push_back(1);
  }
  d.scores.assign(d.tokens.size(), 0.0f);
  for (size_t i = 0; i < pieces.size(); ++i)
    d.scores[259 + i] = pieces[i].second;
  return d;
}

/// Byte-level encoding of one byte as GPT-2 does (printable Latin-1 bytes map to themselves).
std::string bl(unsigned char b) {
  uint32_t n = 0, cpt = 0;
  for (uint32_t x = 0; x < 256; ++x) {
    bool printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    uint32_t c = printable ? x : 256 + n++;
    if (x == b)
      cpt = c;
  }
  std::string s;
  unicode::appendUtf8(s, cpt);
  return s;
}

/// A gpt2 vocabulary: the 256 byte symbols (id = byte) then one token per merge result.
TokenizerData bpeVocab(const std::vector<std::string> &merges, std::string pre = "gpt-2") {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = std::move(pre);
  applyModelDefaults(d);
  d.addBos = false;
  for (int b = 0; b < 256; ++b)
    d.tokens.push_back(bl(static_cast<unsigned char>(b)));
  for (const std::string &m : merges) {
    d.merges.push_back(m);
    std::string joined = m;
    joined.erase(m.find(' ', 1), 1);
    d.tokens.push_back(joined);
  }
  d.tokens.push_back("<|endoftext|>");
  d.tokenTypes.assign(d.tokens.size(), 1);
  d.tokenTypes.back() = 3;
  d.bos = d.eos = static_cast<TokenId>(d.tokens.size() - 1);
  return d;
}

TEST(TokenizerSpm, MergesByScoreWithSpacePrefix) {
  // "▁hello" is reachable only through "▁h" + "ello" ("ello" from "el"+"lo" or "e"+"llo").
  Tokenizer tok(spmVocab({{"\xE2\x96\x81", -1},
                          {"h", -2},
                          {"e", -2},
                          {"l", -2},
                          {"o", -2},
                          {"\xE2\x96\x81h", -3},
                          {"el", -4},
                          {"lo", -4},
                          {"ello", -5},
                          {"\xE2\x96\x81hello", -6}}));
  TokenId hello = tok.find("\xE2\x96\x81hello");
  ASSERT_GE(hello, 0);
  EXPECT_EQ(tok.encode("hello", false), std::vector<TokenId>{hello});
  EXPECT_EQ(tok.encode("hello", true), (std::vector<TokenId>{1, hello}));
  // Two words: the second gets its "▁" from the space in the text, the first from the prefix.
  EXPECT_EQ(tok.encode("hello hello", false), (std::vector<TokenId>{hello, hello}));
  EXPECT_EQ(tok.decode(tok.encode("hello hello", true)), "hello hello");
}

TEST(TokenizerSpm, TiesGoToTheLeftmostPair) {
  // "ab" and "bc" score the same: "abc" must become "ab" + "c", not "a" + "bc".
  TokenizerData d = spmVocab({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -2}});
  d.addSpacePrefix = false;
  Tokenizer noPrefix(d);
  EXPECT_EQ(noPrefix.encode("abc", false), (std::vector<TokenId>{noPrefix.find("ab"), noPrefix.find("c")}));
  // A higher score wins regardless of position.
  d = spmVocab({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}});
  d.addSpacePrefix = false;
  Tokenizer np2(d);
  EXPECT_EQ(np2.encode("abc", false), (std::vector<TokenId>{np2.find("a"), np2.find("bc")}));
}

TEST(TokenizerSpm, ByteFallbackAndDecode) {
  Tokenizer tok(spmVocab({{"\xE2\x96\x81", -1}, {"a", -1}}));
  // "é" = C3 A9 has no piece: byte tokens <0xC3> <0xA9> = ids 3 + 0xC3, 3 + 0xA9.
  std::vector<TokenId> ids = tok.encode("a\xC3\xA9", false);
  EXPECT_EQ(ids, (std::vector<TokenId>{tok.find("\xE2\x96\x81"), tok.find("a"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.decode(ids), "a\xC3\xA9");
  EXPECT_EQ(tok.tokenToPiece(3 + 'A'), "A");
  EXPECT_EQ(tok.tokenToPiece(1), "");          // control token hidden
  EXPECT_EQ(tok.tokenToPiece(1, true), "<s>"); // ... unless asked for
  EXPECT_EQ(tok.tokenToPiece(99999), "");      // out of range: nothing, no crash
  EXPECT_TRUE(tok.encode("", true) == std::vector<TokenId>{1});
}

TEST(TokenizerSpm, StreamingHoldsBackPartialUtf8) {
  Tokenizer tok(spmVocab({{"\xE2\x96\x81", -1}, {"a", -1}}));
  StreamDecoder sd(tok);
  std::string out = sd.push(1); // BOS
  out += sd.push(tok.find("a"));
  EXPECT_EQ(out, "a");
  EXPECT_EQ(sd.push(3 + 0xC3), ""); // first half of é is held back
  EXPECT_EQ(sd.push(3 + 0xA9), "\xC3\xA9");
  EXPECT_EQ(sd.push(3 + 0xE2), "");
  EXPECT_EQ(sd.flush(), "\xE2");
}

TEST(TokenizerSpec, SpecialTokensParsedOnlyWhenAsked) {
  TokenizerData d = spmVocab({{"\xE2\x96\x81", -1}, {"x", -1}, {"<|end|>", 0}, {"<u>", 0}});
  TokenId end = 259 + 2, user = 259 + 3;
  d.tokenTypes[end] = 3;  // control
  d.tokenTypes[user] = 4; // user-defined: always matched
  Tokenizer tok(d);
  std::vector<TokenId> plain = tok.encode("x<|end|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_GT(plain.size(), 3u); // spelled out in bytes
  std::vector<TokenId> parsed = tok.encode("x<|end|>x", false, true);
  // After a special token the text gets the space prefix again, as in llama.cpp.
  TokenId sp = tok.find("\xE2\x96\x81"), x = tok.find("x");
  EXPECT_EQ(parsed, (std::vector<TokenId>{sp, x, end, sp, x}));
  EXPECT_EQ(tok.encode("<u>", false, false), std::vector<TokenId>{user});
}

TEST(TokenizerSpec, StripAttributesSwallowWhitespace) {
  TokenizerData d = spmVocab({{"\xE2\x96\x81", -1}, {"x", -1}, {"<L>", 0}, {"<R>", 0}});
  TokenId l = 259 + 2, r = 259 + 3;
  d.tokenTypes[l] = d.tokenTypes[r] = 4;
  d.lstripTokens = {l};
  d.rstripTokens = {r};
  Tokenizer tok(d);
  TokenId sp = tok.find("\xE2\x96\x81"), x = tok.find("x");
  // "x \n<L>": the whitespace before <L> goes; " \t<R> x": the whitespace after <R> goes.
  EXPECT_EQ(tok.encode("x \n<L>", false), (std::vector<TokenId>{sp, x, l}));
  EXPECT_EQ(tok.encode("<R> \tx", false), (std::vector<TokenId>{r, sp, x}));
  // Without the attribute the whitespace stays (as bytes / pieces).
  d.rstripTokens.clear();
  Tokenizer plain(d);
  EXPECT_GT(plain.encode("<R> \tx", false).size(), 3u);
  d.rstripTokens = {9999};
  EXPECT_THROW(Tokenizer{d}, TokenizerError);
}

TEST(TokenizerBpe, MergesByRank) {
  // Rank order makes "ab"+"c" win over "a"+"bc" even though "bc" comes later in the word.
  Tokenizer tok(bpeVocab({"a b", "b c", "ab c"}));
  TokenId ab = tok.find("ab"), abc = tok.find("abc");
  EXPECT_EQ(tok.encode("abc", false), std::vector<TokenId>{abc});
  EXPECT_EQ(tok.encode("abcb", false), (std::vector<TokenId>{abc, 'b'}));
  Tokenizer tok2(bpeVocab({"b c", "a b", "ab c"}));
  // "bc" first now, so "abc" is never reachable: a + bc.
  EXPECT_EQ(tok2.encode("abc", false), (std::vector<TokenId>{'a', tok2.find("bc")}));
  (void)ab;
  // Spaces are the byte-level 'Ġ' (U+0120) and pieces come from the pre-tokenizer.
  Tokenizer tok3(bpeVocab({"\xC4\xA0 a", "\xC4\xA0"
                                         "a b"}));
  EXPECT_EQ(tok3.encode("ab ab", false), (std::vector<TokenId>{'a', 'b',
                                                               tok3.find("\xC4\xA0"
                                                                         "ab")}));
  EXPECT_EQ(tok3.decode(tok3.encode("ab ab\n\xC3\xA9", false)), "ab ab\n\xC3\xA9");
  EXPECT_EQ(tok3.tokenToPiece(tok3.find("\xC4\xA0"
                                        "ab")),
            " ab");
}

TEST(TokenizerBpe, AddsBosAndEosAsConfigured) {
  TokenizerData d = bpeVocab({"a b"});
  d.addBos = true;
  d.addEos = true;
  Tokenizer tok(d);
  std::vector<TokenId> ids = tok.encode("ab", true);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), d.bos);
  EXPECT_EQ(ids.back(), d.eos);
  EXPECT_EQ(tok.encode("ab", false).size(), 1u);
  EXPECT_TRUE(tok.isEog(d.eos));
}

TEST(TokenizerBpe, PreTokenizerNamesAndDefaults) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "llama-bpe";
  applyModelDefaults(d);
  EXPECT_TRUE(d.ignoreMerges);
  EXPECT_TRUE(d.addBos);
  d = bpeVocab({"a b"}, "dbrx"); // llama3 regex, but not llama3's flags
  EXPECT_FALSE(d.ignoreMerges);
  d = bpeVocab({"a b"}, "qwen2");
  EXPECT_FALSE(d.cleanSpaces);
  d = bpeVocab({"a b"}, "qwen35");
  EXPECT_FALSE(d.cleanSpaces);
  EXPECT_FALSE(d.ignoreMerges);
  d = bpeVocab({"a b"}, "gpt-2");
  EXPECT_TRUE(d.cleanSpaces);
  d = bpeVocab({"a b"}, "gpt-4o"); // gpt-oss: clean_spaces off, as the reference
  EXPECT_FALSE(d.cleanSpaces);
  EXPECT_NO_THROW(Tokenizer{bpeVocab({"a b"}, "gpt-4o")});
  for (const char *pre : {"mpt", "olmo", "smaug-bpe", "stablelm2", "default", ""})
    EXPECT_NO_THROW(Tokenizer{bpeVocab({"a b"}, pre)}) << pre;
  // ignore_merges: a pre-token that is itself a vocabulary entry is taken whole, even when the merges
  // cannot build it ("xyz" has no merges at all).
  d = bpeVocab({"a b"}, "llama3");
  d.tokens.push_back("xyz");
  d.tokenTypes.push_back(1);
  Tokenizer whole(d);
  EXPECT_EQ(whole.encode("xyz", false), std::vector<TokenId>{whole.find("xyz")});
  d.ignoreMerges = false;
  Tokenizer merged(d);
  EXPECT_EQ(merged.encode("xyz", false), (std::vector<TokenId>{'x', 'y', 'z'}));
}

/// pre = "qwen35" selects the mark-aware pre-tokenizer end to end: "e" + U+0301 is one pre-token, so the
/// merge into the whole "é" applies; under qwen2 the mark is its own piece and the merge cannot cross.
TEST(TokenizerBpe, Qwen35MergesAcrossCombiningMarks) {
  const std::string acute = bl(0xCC) + bl(0x81); // U+0301 as byte-level symbols
  std::vector<std::string> merges = {bl(0xCC) + " " + bl(0x81), "e " + acute};
  Tokenizer q35(bpeVocab(merges, "qwen35"));
  Tokenizer q2(bpeVocab(merges, "qwen2"));
  TokenId e = q35.find("e" + acute), mark = q35.find(acute);
  ASSERT_GE(e, 0);
  ASSERT_GE(mark, 0);
  EXPECT_EQ(q35.encode("e\xCC\x81", false), std::vector<TokenId>{e});
  EXPECT_EQ(q2.encode("e\xCC\x81", false), (std::vector<TokenId>{'e', mark}));
  EXPECT_EQ(q35.decode(q35.encode("cafe\xCC\x81 e\xCC\x81", false)), "cafe\xCC\x81 e\xCC\x81");
}

TEST(TokenizerBpe, CleanSpacesOnDecode) {
  TokenizerData d = bpeVocab({});
  d.merges = {"a b"};
  d.tokens.push_back("ab");
  d.tokenTypes.push_back(1);
  d.cleanSpaces = true;
  Tokenizer tok(d);
  EXPECT_EQ(tok.decode(tok.encode("x , y ' z it 's", false)), "x, y'z it's");
  d.cleanSpaces = false;
  Tokenizer raw(d);
  EXPECT_EQ(raw.decode(raw.encode("x , y ' z it 's", false)), "x , y ' z it 's");
}

std::vector<std::string> pre(const std::string &text, const char *name) {
  return unicode::preTokenize(text, name);
}

TEST(PreTokenizer, Gpt2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre("Hello world's 123 !!", "gpt2"), (V{"Hello", " world", "'s", " 123", " !!"}));
  // \s+(?!\S): the last space of a run goes to the next word.
  EXPECT_EQ(pre("a   b", "gpt2"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pre("a  \n", "gpt2"), (V{"a", "  \n"}));
  EXPECT_EQ(pre("caf\xC3\xA9 \xD0\xBD\xD0\xB0", "gpt2"), (V{"caf\xC3\xA9", " \xD0\xBD\xD0\xB0"}));
  EXPECT_EQ(pre("", "gpt2"), V{});
}

TEST(PreTokenizer, Llama3AndQwen2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre("12345", "llama3"), (V{"123", "45"}));
  EXPECT_EQ(pre("12345", "qwen2"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(pre("I'LL go", "llama3"), (V{"I", "'LL", " go"}));
  EXPECT_EQ(pre("x\n\n y", "llama3"), (V{"x", "\n\n", " y"}));
  EXPECT_EQ(pre("a!?\nb", "llama3"), (V{"a", "!?\n", "b"}));
  EXPECT_EQ(pre("(hello", "llama3"), (V{"(hello"}));
}

/// gpt-4o (gpt-oss): words split at case changes (U*L+ takes the capitals before a lowercase run, U+L* an
/// all-capitals word), contractions in any case, numbers in threes, slashes and newlines riding on symbol
/// runs, the last of several spaces going to the next word. SharedVocab.Gpt4oPreTokenizer checks ids
/// against the reference engine on a real vocabulary.
TEST(PreTokenizer, Gpt4oCaseClassesAndSymbols) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre("HelloWorld HTTPServer ALLCAPS", "gpt4o"), (V{"Hello", "World", " HTTPServer", " ALLCAPS"}));
  EXPECT_EQ(pre("camelCaseWord", "gpt4o"), (V{"camel", "Case", "Word"}));
  EXPECT_EQ(pre("they'RE DON'T", "gpt4o"), (V{"they'RE", " DON'T"}));
  EXPECT_EQ(pre("12345", "gpt4o"), (V{"123", "45"}));
  EXPECT_EQ(pre("a  b", "gpt4o"), (V{"a", " ", " b"}));
  EXPECT_EQ(pre("x\n\n y", "gpt4o"), (V{"x", "\n\n", " y"}));
  EXPECT_EQ(pre("path/to // c\n/usr", "gpt4o"), (V{"path", "/to", " //", " c", "\n", "/usr"}));
  EXPECT_EQ(pre("!!!\n\nx", "gpt4o"), (V{"!!!\n\n", "x"}));
  EXPECT_EQ(pre("end   ", "gpt4o"), (V{"end", "   "}));
  // A non-ASCII letter is in both case classes (the reference's collapsed text): "\xC3\x89" (É) then "cole"
  // is one word, but before capitals U*L+ still wins with É as its one lowercase letter, so " ÉCOLE" is
  // " É" + "COLE" (the reference's ids in SharedVocab.Gpt4oPreTokenizer agree).
  EXPECT_EQ(pre("\xC3\x89" "cole \xC3\x89" "COLE", "gpt4o"), (V{"\xC3\x89" "cole", " \xC3\x89", "COLE"}));
}

/// qwen35 is qwen2 with \p{M} in the letter classes: a combining mark stays on its word instead of starting
/// a new piece or riding on a symbol run. Expected pieces as the Python `regex` module gives them.
TEST(PreTokenizer, Qwen35KeepsMarksWithLetters) {
  using V = std::vector<std::string>;
  // "e" + U+0301 (combining acute): one word under qwen35, the mark split off under qwen2.
  EXPECT_EQ(pre("e\xCC\x81", "qwen35"), V{"e\xCC\x81"});
  EXPECT_EQ(pre("e\xCC\x81", "qwen2"), (V{"e", "\xCC\x81"}));
  // Decomposed "résumé": qwen2 makes the mark the one-character prefix of the next letters.
  EXPECT_EQ(pre("re\xCC\x81sume\xCC\x81", "qwen35"), V{"re\xCC\x81sume\xCC\x81"});
  EXPECT_EQ(pre("re\xCC\x81sume\xCC\x81", "qwen2"), (V{"re", "\xCC\x81sume", "\xCC\x81"}));
  // Devanagari "नमस्ते दुनिया": the virama and vowel signs (Mn) no longer cut the words.
  const std::string namaste = "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87";
  const std::string duniya = " \xE0\xA4\xA6\xE0\xA5\x81\xE0\xA4\xA8\xE0\xA4\xBF\xE0\xA4\xAF\xE0\xA4\xBE";
  EXPECT_EQ(pre(namaste + duniya, "qwen35"), (V{namaste, duniya}));
  EXPECT_EQ(pre(namaste + duniya, "qwen2").size(), 7u);
  // A space before a mark is its prefix, and the letters after the mark join it.
  EXPECT_EQ(pre(" \xCC\x81x", "qwen35"), V{" \xCC\x81x"});
  EXPECT_EQ(pre(" \xCC\x81x", "qwen2"), (V{" \xCC\x81", "x"}));
  // Marks leave the symbol run: "!!" + mark and an emoji + U+FE0F (variation selector, Mn) split there.
  EXPECT_EQ(pre("!!\xCC\x81", "qwen35"), (V{"!!", "\xCC\x81"}));
  EXPECT_EQ(pre("!!\xCC\x81", "qwen2"), V{"!!\xCC\x81"});
  EXPECT_EQ(pre(" \xF0\x9F\x8C\xAB\xEF\xB8\x8F ok", "qwen35"),
            (V{" \xF0\x9F\x8C\xAB", "\xEF\xB8\x8F", " ok"}));
  EXPECT_EQ(pre(" \xF0\x9F\x8C\xAB\xEF\xB8\x8F ok", "qwen2"), (V{" \xF0\x9F\x8C\xAB\xEF\xB8\x8F", " ok"}));
  // An enclosing mark (Me, U+20DD) is a mark too.
  EXPECT_EQ(pre("a\xE2\x83\x9D!", "qwen35"), (V{"a\xE2\x83\x9D", "!"}));
  // Digits and contractions are qwen2's: one digit a piece.
  EXPECT_EQ(pre("I'LL 12", "qwen35"), (V{"I", "'LL", " ", "1", "2"}));
}

TEST(PreTokenizer, Default) {
  using V = std::vector<std::string>;
  // Punctuation runs first, then gpt2, then digit runs cut in threes.
  EXPECT_EQ(pre("ab,cd 12345", "default"), (V{"ab", ",", "cd", " ", "123", "45"}));
  // A digit run shorter than three stays with the text before it ([0-9]{3} does not match there).
  EXPECT_EQ(pre("\xC2\xBD"
                "9~",
                "default"),
            (V{"\xC2\xBD"
               "9",
               "~"}));
}

TEST(Unicode, Flags) {
  EXPECT_TRUE(unicode::flags('a') & unicode::Letter);
  EXPECT_TRUE(unicode::flags(0xE9) & unicode::Letter);   // é
  EXPECT_TRUE(unicode::flags(0x4E2D) & unicode::Letter); // 中
  EXPECT_TRUE(unicode::flags('7') & unicode::Number);
  EXPECT_TRUE(unicode::flags(0xBD) & unicode::Number); // ½
  EXPECT_TRUE(unicode::flags(' ') & unicode::Whitespace);
  EXPECT_TRUE(unicode::flags(0x3000) & unicode::Whitespace);
  EXPECT_FALSE(unicode::flags(0x1C) & unicode::Whitespace); // not White_Space despite str.isspace()
  EXPECT_TRUE(unicode::flags('!') & unicode::Punctuation);
  EXPECT_TRUE(unicode::flags(0x1F999) & unicode::Symbol); // 🦙
  EXPECT_EQ(unicode::flags(0x378), unicode::Undefined);
  // Marks (Mn, Mc, Me) for qwen35's \p{M}; none of them is a letter.
  for (uint32_t mark : {0x301u, 0x94Du, 0x903u, 0x20DDu, 0xFE0Fu}) {
    EXPECT_EQ(unicode::flags(mark), unicode::AccentMark) << std::hex << mark;
  }
  EXPECT_EQ(unicode::flags(0x110000), 0u);
}

TEST(TokenizerRobustness, RandomTextRoundTrip) {
  // BPE: arbitrary bytes, malformed UTF-8 included, come back exactly (byte-level alphabet). SPM: any
  // valid UTF-8 without U+2581 comes back through byte fallback (a literal U+2581 reads as a space, and a
  // stray lead byte before a space swallows its U+2581 into a byte run, as in llama.cpp).
  Tokenizer spm(spmVocab({{"\xE2\x96\x81", -1},
                          {"a", -1},
                          {"\xE2\x96\x81"
                           "a",
                           -2},
                          {"\xC3\xA9", -1}}));
  TokenizerData bd = bpeVocab({"a b", "\xC4\xA0 a"});
  bd.cleanSpaces = false; // " !" would lose its space on purpose
  Tokenizer bpe(bd);
  std::mt19937 gen(42);
  const char bytes[] = {'a',    'b',    ' ',    '\n',   '\t',   '\'',   '1',    '!',
                        '\xC3', '\xA9', '\xE2', '\x96', '\x81', '\xF0', '\xFF', '\0'};
  const char *chars[] = {"a",           "b", " ", "  ",       "\n",           "\t",
                         "'",           "1", "!", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\xA6\x99",
                         "\xE4\xB8\xAD"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string raw, valid;
    size_t len = gen() % 24;
    for (size_t i = 0; i < len; ++i) {
      raw += bytes[gen() % sizeof bytes];
      valid += chars[gen() % (sizeof chars / sizeof *chars)];
    }
    EXPECT_EQ(spm.decode(spm.encode(valid, true)), valid) << "spm trial " << trial;
    EXPECT_EQ(bpe.decode(bpe.encode(raw, false)), raw) << "bpe trial " << trial;
    for (const char *p : {"gpt2", "llama3", "qwen2", "qwen35", "default"}) {
      std::string joined;
      for (const std::string &piece : unicode::preTokenize(raw, p))
        joined += piece;
      EXPECT_EQ(joined, raw) << p << " trial " << trial; // pieces cover the text exactly
    }
  }
}

TEST(TokenizerValidation, ClearErrors) {
  auto expectError = [](TokenizerData d, const char *needle) {
    try {
      Tokenizer::validate(d); // the checks alone must refuse what the constructor refuses
      ADD_FAILURE() << "validate: no error, expected one mentioning " << needle;
    } catch (const TokenizerError &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    try {
      Tokenizer t(std::move(d));
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const TokenizerError &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(Tokenizer::validate(spmVocab({{"a", -1}})));
  TokenizerData d = spmVocab({{"a", -1}});
  d.scores.pop_back();
  expectError(d, "tokenizer.ggml.scores");
  d = spmVocab({{"a", -1}});
  d.bos = 100000;
  expectError(d, "bos_token_id");
  d = spmVocab({{"a", -1}});
  d.model = "bert";
  expectError(d, "unsupported tokenizer.ggml.model");
  TokenizerData b = bpeVocab({"a b"});
  b.pre = "no-such-pre";
  expectError(b, "no-such-pre");
  expectError(b, "qwen35"); // the list of supported names includes it
  expectError(b, "glm4");
  b = bpeVocab({"a b"});
  b.merges.push_back("nospace");
  expectError(b, "merges");
  TokenizerData e;
  expectError(e, "no tokens");
}

/// Start-up work: turning ids into text (what `tpc run --prompt-ids` does) never builds the encoder's
/// tables; the first encode() or find() does, once.
TEST(TokenizerTables, BuiltOnlyByTheFirstEncodeOrFind) {
  Tokenizer tok(spmVocab({{"\xE2\x96\x81", -1}, {"a", -1}}));
  EXPECT_FALSE(tok.encoderTablesBuilt());
  StreamDecoder sd(tok);
  EXPECT_EQ(sd.push(259 + 1), "a");
  EXPECT_EQ(tok.decode({1, 259 + 1, 3 + 'b'}), "ab");
  EXPECT_TRUE(tok.isEog(2));
  EXPECT_FALSE(tok.encoderTablesBuilt());
  EXPECT_EQ(tok.find("a"), 259 + 1);
  EXPECT_TRUE(tok.encoderTablesBuilt());
  Tokenizer other(spmVocab({{"a", -1}}));
  // The space prefix "\xE2\x96\x81" has no piece here: its three byte tokens, then "a".
  EXPECT_EQ(other.encode("a", false), (std::vector<TokenId>{3 + 0xE2, 3 + 0x96, 3 + 0x81, 259}));
  EXPECT_TRUE(other.encoderTablesBuilt());
}

/// The hash index against a plain map on a large vocabulary of texts that share long prefixes (where a weak
/// hash collides), with duplicate texts (the last id wins, as in llama.cpp) and duplicate merges (the first,
/// lower rank wins).
TEST(TokenizerTables, LookupsMatchAMapOnALargeVocabulary) {
  TokenizerData d = bpeVocab({"a b", "a b"});
  std::map<std::string, TokenId> want;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    want[d.tokens[i]] = static_cast<TokenId>(i);
  std::mt19937 rng(7);
  for (int i = 0; i < 50000; ++i) {
    std::string t = "\xC4\xA0prefix_shared_by_all_of_them_" + std::to_string(rng() % 40000);
    want[t] = static_cast<TokenId>(d.tokens.size()); // a repeated text: the later id
    d.tokens.push_back(t);
  }
  d.scores.clear();
  d.tokenTypes.clear();
  Tokenizer tok(d);
  for (const auto &[text, id] : want)
    ASSERT_EQ(tok.find(text), id) << text;
  EXPECT_EQ(tok.find("\xC4\xA0prefix_shared_by_all_of_them_40001"), -1);
  EXPECT_EQ(tok.find(""), -1);
  EXPECT_EQ(tok.encode("ab", false), std::vector<TokenId>{tok.find("ab")});
}

/// Gemma 3's vocabulary size: the texts are kept as one blob with 4-byte offsets, so the tokenizer's heap is
/// the text bytes plus 4 bytes each of offset and score per token and a byte each of type and strip flag,
/// far below the 32-byte std::string per token it held before (rank 0 of an MPI job holds these alone).
TEST(TokenizerTables, CompactTextsFor262kTokens) {
  std::vector<std::pair<std::string, float>> pieces;
  const size_t n = 262144;
  size_t textBytes = 0;
  for (size_t i = 0; pieces.size() + 259 < n; ++i) {
    // Mostly short pieces, every 16th past std::string's 15-byte inline buffer.
    std::string t = "\xE2\x96\x81w" + std::to_string(i) + (i % 16 == 0 ? "_long_piece_text" : "");
    pieces.emplace_back(t, -static_cast<float>(i));
  }
  TokenizerData d = spmVocab(pieces);
  ASSERT_EQ(d.tokens.size(), n);
  for (const std::string &t : d.tokens)
    textBytes += t.size();
  const std::string w7 = d.tokens[259 + 7];
  Tokenizer tok(std::move(d));
  EXPECT_EQ(tok.size(), n);
  EXPECT_TRUE(tok.data().tokens.empty()); // moved into the blob, not kept twice
  EXPECT_EQ(tok.token(259 + 7), w7);
  EXPECT_EQ(tok.token(0), "<unk>");
  EXPECT_EQ(tok.token(3 + 0x41), "<0x41>");
  EXPECT_EQ(tok.token(static_cast<TokenId>(n)), "");
  EXPECT_EQ(tok.token(-1), "");
  EXPECT_LE(tok.heapBytes(), textBytes + 12 * n);
  EXPECT_GE(tok.heapBytes(), textBytes + 10 * n); // counts texts, offsets, scores, types and strip flags
  EXPECT_TRUE(tok.data().tokenTypes.empty());
  EXPECT_EQ(tok.tokenToPiece(3 + 0x41), "A"); // a byte token still reads as one
  EXPECT_EQ(tok.decode({259 + 7}), w7.substr(3));
  EXPECT_EQ(tok.find(w7), 259 + 7);
}

/// A decode-only tokenizer drops scores and merges (their bytes leave heapBytes) but still decodes and
/// finds texts; encoding is refused with a clear error instead of giving wrong ids.
TEST(TokenizerTables, DecodeOnlyDropsScoresAndMerges) {
  TokenizerData d = spmVocab({{"\xE2\x96\x81", -1}, {"a", -2}, {"\xE2\x96\x81" "a", -3}});
  const size_t n = d.tokens.size();
  Tokenizer full(d);
  Tokenizer dec(std::move(d), TokenizerUse::DecodeOnly);
  EXPECT_EQ(full.heapBytes() - dec.heapBytes(), n * sizeof(float));
  EXPECT_TRUE(dec.data().scores.empty());
  EXPECT_EQ(dec.decode({1, 261}), "a");
  EXPECT_EQ(dec.find("a"), 260);
  EXPECT_TRUE(dec.isEog(2));
  EXPECT_THROW(dec.encode("a", true), TokenizerError);
  EXPECT_EQ(full.encode("a", false), std::vector<TokenId>{261});
  TokenizerData b = bpeVocab({"a b", "ab c"});
  Tokenizer fullBpe(b), decBpe(std::move(b), TokenizerUse::DecodeOnly);
  EXPECT_LT(decBpe.heapBytes(), fullBpe.heapBytes());
  EXPECT_TRUE(decBpe.data().merges.empty());
  EXPECT_EQ(decBpe.decode({fullBpe.find("abc")}), "abc");
}

/// dropEncoder() after an encode: scores and merges leave heapBytes, decoding still works, encode() and
/// find() say why they cannot.
TEST(TokenizerTables, DropEncoderKeepsDecoding) {
  TokenizerData d = spmVocab({{"\xE2\x96\x81", -1}, {"a", -2}, {"\xE2\x96\x81" "a", -3}});
  const size_t n = d.tokens.size();
  Tokenizer tok(std::move(d));
  const std::vector<TokenId> ids = tok.encode("a", true);
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 261}));
  const size_t before = tok.heapBytes();
  tok.dropEncoder();
  EXPECT_EQ(before - tok.heapBytes(), n * sizeof(float));
  EXPECT_EQ(tok.decode(ids), "a");
  EXPECT_EQ(tok.token(261), "\xE2\x96\x81" "a");
  EXPECT_THROW(tok.encode("a", true), TokenizerError);
  EXPECT_THROW(tok.find("a"), TokenizerError);
  TokenizerData b = bpeVocab({"a b", "ab c"});
  Tokenizer bpe(std::move(b));
  EXPECT_EQ(bpe.encode("abc", false), std::vector<TokenId>{bpe.find("abc")});
  bpe.dropEncoder();
  EXPECT_TRUE(bpe.data().merges.empty());
  EXPECT_EQ(bpe.decode({256, 257}), "ababc");
}

} // namespace

TEST(TokenizerSpec, HarmonyEndClosesAMessageNotTheTurn) {
  // gpt-oss: <|end|> closes the analysis message before the final one; <|return|> and <|call|> end the
  // turn. A vocabulary with all three keeps <|end|> out of EOG (llama.cpp's rule); one without keeps it.
  TokenizerData d = spmVocab({{"x", -1}, {"<|end|>", 0}, {"<|return|>", 0}, {"<|call|>", 0}});
  const TokenId end = 259 + 1, ret = 259 + 2, call = 259 + 3;
  d.tokenTypes[end] = d.tokenTypes[ret] = d.tokenTypes[call] = 3;
  TokenizerData phi = d;
  phi.tokens[ret] = "<|ret|>", phi.tokens[call] = "<|cal|>";
  addEndOfGenerationTokens(d);
  addEndOfGenerationTokens(phi);
  Tokenizer harmony(d), other(phi);
  EXPECT_FALSE(harmony.isEog(end));
  EXPECT_TRUE(harmony.isEog(ret));
  EXPECT_TRUE(harmony.isEog(call));
  EXPECT_TRUE(other.isEog(end));
  // A stream decoder shows control tokens only when asked (tpc serve's output parser reads the markers).
  StreamDecoder hidden(harmony), shown(harmony, false, /*special=*/true);
  EXPECT_EQ(hidden.push(end), "");
  EXPECT_EQ(shown.push(end), "<|end|>");
}
