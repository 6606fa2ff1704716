//===- Unicode.cpp - code point classes and BPE pre-tokenizers -------------===//
//
// UTF-8 helpers, the code point class lookup over the generated UnicodeTables.inc, and the pre-tokenizer
// regexes of the byte-level BPE vocabularies as hand-written matchers (std::regex has no \p{L}). Each
// matcher reproduces llama.cpp's custom implementation of the same regex (unicode.cpp), including its
// treatment of \s+(?!\S): a run of whitespace followed by a non-space gives its last space to the next
// piece. qwen35 has no custom implementation there (llama.cpp runs std::regex over a text collapsed to one
// byte per class); it is the qwen2 matcher with marks counted as letters, checked by the oracle tests.
// Positions are code point indices; pieces are returned as UTF-8 substrings of the input.
//===----------------------------------------------------------------------===//
#include "runtime/tokenizer/Tokenizer.h"

#include <algorithm>

namespace tpc::rt::unicode {
namespace {

/// One range of the generated table: code points from `first` to the next entry's first.
struct Range {
  uint32_t first;
  uint32_t flags;
};

const Range kRanges[] = {
#include "runtime/tokenizer/UnicodeTables.inc"
};

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

/// The code points of one text and the flags of each, with out-of-range reads giving kOutOfRange / 0, so
/// the matchers can look ahead freely like llama.cpp's _get_cpt/_get_flags.
struct Cursor {
  const std::vector<uint32_t> &cpts;
  size_t begin, end;
  uint32_t cpt(size_t pos) const { return pos >= begin && pos < end ? cpts[pos] : kOutOfRange; }
  uint32_t fl(size_t pos) const { return pos >= begin && pos < end ? flags(cpts[pos]) : 0; }
};

bool isWs(uint32_t f) { return f & Whitespace; }
bool isLetter(uint32_t f) { return f & Letter; }
bool isNumber(uint32_t f) { return f & Number; }
uint32_t asciiLower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/// Appends piece lengths (in code points) covering [begin, end) of `cpts` for the gpt2 regex
/// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void splitGpt2(const std::vector<uint32_t> &cpts, size_t begin, size_t end, std::vector<size_t> &out) {
  Cursor c{cpts, begin, end};
  size_t prevEnd = begin;
  auto add = [&](size_t e) {
    size_t len = e - prevEnd;
    if (len > 0)
      out.push_back(len);
    prevEnd = e;
    return len;
  };
  for (size_t pos = begin; pos < end;) {
    uint32_t cpt = c.cpt(pos);
    uint32_t f = c.fl(pos);
    if (cpt == '\'' && pos + 1 < end) {
      uint32_t n = c.cpt(pos + 1);
      if (n == 's' || n == 't' || n == 'm' || n == 'd') {
        pos += add(pos + 2);
        continue;
      }
      if (pos + 2 < end) {
        uint32_t nn = c.cpt(pos + 2);
        if ((n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l')) {
          pos += add(pos + 3);
          continue;
        }
      }
    }
    uint32_t f2 = cpt == ' ' ? c.fl(pos + 1) : f;
    if (isLetter(f2)) {
      pos += cpt == ' ';
      while (isLetter(c.fl(pos)))
        ++pos;
      add(pos);
      continue;
    }
    if (isNumber(f2)) {
      pos += cpt == ' ';
      while (isNumber(c.fl(pos)))
        ++pos;
      add(pos);
      continue;
    }
    if (!(isWs(f2) || isLetter(f2) || isNumber(f2)) && f2) {
      pos += cpt == ' ';
      while (!(isWs(f2) || isLetter(f2) || isNumber(f2)) && f2)
        f2 = c.fl(++pos);
      add(pos);
      continue;
    }
    size_t nws = 0;
    while (isWs(c.fl(pos + nws)))
      ++nws;
    if (nws > 1 && c.cpt(pos + nws) != kOutOfRange) {
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

/// The llama3 regex (maxDigits 3) and the qwen2 regex (maxDigits 1), which differ only in \p{N}{1,3}:
/// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
/// \s+(?!\S)|\s+
/// With `marks`, the qwen35 regex: \p{M} joins the letter run ([\p{L}\p{M}]+) and leaves the symbol run
/// ([^\s\p{L}\p{M}\p{N}]+), so a combining accent stays on its letter instead of becoming its own piece.
/// A mark is also a valid one-character prefix ([^\r\n\p{L}\p{N}]?), which changes nothing: the prefix
/// and the run then cover the same code points.
void splitLlama3(const std::vector<uint32_t> &cpts, size_t begin, size_t end, size_t maxDigits, bool marks,
                 std::vector<size_t> &out) {
  Cursor c{cpts, begin, end};
  const uint32_t wordFlags = marks ? Letter | AccentMark : Letter;
  auto isWord = [&](uint32_t f) { return (f & wordFlags) != 0; };
  size_t prevEnd = begin;
  auto add = [&](size_t e) {
    size_t len = e - prevEnd;
    if (len > 0)
      out.push_back(len);
    prevEnd = e;
    return len;
  };
  for (size_t pos = begin; pos < end;) {
    uint32_t cpt = c.cpt(pos);
    uint32_t f = c.fl(pos);
    if (cpt == '\'' && pos + 1 < end) {
      uint32_t n = asciiLower(c.cpt(pos + 1));
      if (n == 's' || n == 't' || n == 'm' || n == 'd') {
        pos += add(pos + 2);
        continue;
      }
      if (pos + 2 < end) {
        uint32_t nn = asciiLower(c.cpt(pos + 2));
        if ((n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l')) {
          pos += add(pos + 3);
          continue;
        }
      }
    }
    if (!(cpt == '\r' || cpt == '\n' || isNumber(f))) {
      if (isWord(f) || isWord(c.fl(pos + 1))) {
        ++pos;
        while (isWord(c.fl(pos)))
          ++pos;
        add(pos);
        continue;
      }
    }
    if (isNumber(f)) {
      size_t ini = pos;
      while (isNumber(c.fl(pos))) {
        if (++pos - ini >= maxDigits) {
          add(pos);
          ini = pos;
        }
      }
      add(pos);
      continue;
    }
    uint32_t f2 = cpt == ' ' ? c.fl(pos + 1) : f;
    if (!(isWs(f2) || isWord(f2) || isNumber(f2)) && f) {
      pos += cpt == ' ';
      while (!(isWs(f2) || isWord(f2) || isNumber(f2)) && f2)
        f2 = c.fl(++pos);
      uint32_t c2 = c.cpt(pos);
      while (c2 == '\r' || c2 == '\n')
        c2 = c.cpt(++pos);
      add(pos);
      continue;
    }
    size_t nws = 0, lastRN = 0;
    while (isWs(c.fl(pos + nws))) {
      uint32_t c2 = c.cpt(pos + nws);
      if (c2 == '\r' || c2 == '\n')
        lastRN = pos + nws + 1;
      ++nws;
    }
    if (lastRN > 0) {
      pos = lastRN;
      add(pos);
      continue;
    }
    if (nws > 1 && c.cpt(pos + nws) != kOutOfRange) {
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

/// The gpt-4o (o200k) regex as llama.cpp runs it: std::regex over the text collapsed to one byte per code
/// point (ASCII kept, other letters, numbers and whitespace to one class byte each), where \p{L} is
/// [A-Za-z or another letter] and the case classes become "a letter but not a-z" (U) and "a letter but not
/// A-Z" (L), so a non-ASCII letter is both and marks are symbols:
///   [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|
///   \s+(?!\S)|\s+                     C = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
/// Alternatives are tried in order, each quantifier greedy with backtracking (ECMAScript); whitespace is
/// std::regex's \s on the collapsed text (ASCII \t\n\v\f\r and space, other whitespace as \v). Every code
/// point matches some alternative, so the pieces cover the text.
void splitGpt4o(const std::vector<uint32_t> &cpts, size_t begin, size_t end, std::vector<size_t> &out) {
  Cursor c{cpts, begin, end};
  auto letter = [&](size_t p) {
    uint32_t ch = c.cpt(p);
    return ch < 0x80 ? (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') : isLetter(c.fl(p));
  };
  auto upper = [&](size_t p) { return letter(p) && !(c.cpt(p) >= 'a' && c.cpt(p) <= 'z'); }; // U
  auto lower = [&](size_t p) { return letter(p) && !(c.cpt(p) >= 'A' && c.cpt(p) <= 'Z'); }; // L
  auto number = [&](size_t p) {
    uint32_t ch = c.cpt(p);
    return ch < 0x80 ? ch >= '0' && ch <= '9' : isNumber(c.fl(p));
  };
  auto space = [&](size_t p) {
    uint32_t ch = c.cpt(p);
    if (ch == kOutOfRange)
      return false;
    return ch < 0x80 ? ch == ' ' || (ch >= '\t' && ch <= '\r') : isWs(c.fl(p));
  };
  auto newline = [&](size_t p) { return c.cpt(p) == '\r' || c.cpt(p) == '\n'; };
  auto inText = [&](size_t p) { return p < end; };
  // [^\r\n\p{L}\p{N}]: any code point but those (whitespace and symbols included).
  auto prefix = [&](size_t p) { return inText(p) && !newline(p) && !letter(p) && !number(p); };
  auto run = [&](size_t p, auto pred) {
    while (inText(p) && pred(p))
      ++p;
    return p;
  };
  auto contraction = [&](size_t p) -> size_t {
    if (c.cpt(p) != '\'')
      return p;
    uint32_t a = asciiLower(c.cpt(p + 1)), b = asciiLower(c.cpt(p + 2));
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
      return p + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
      return p + 3;
    return p;
  };
  // U*L+C? from s: the longest U run that still leaves an L after it, then the L run. 0: no match.
  auto upperLower = [&](size_t s) -> size_t {
    for (size_t k = run(s, upper); k + 1 > s; --k) {
      if (inText(k) && lower(k))
        return contraction(run(k, lower));
      if (k == s)
        break;
    }
    return 0;
  };
  for (size_t pos = begin; pos < end;) {
    size_t e = 0;
    // The optional prefix is tried first; without it the run would have to start at a non-letter.
    size_t s = prefix(pos) ? pos + 1 : pos;
    if ((e = upperLower(s)) == 0 && inText(s) && upper(s))
      e = contraction(run(run(s, upper), lower)); // U+L*C?
    if (e == 0 && number(pos))
      e = std::min(run(pos, number), pos + 3);
    if (e == 0) {
      size_t q = c.cpt(pos) == ' ' && inText(pos + 1) && !space(pos + 1) && !letter(pos + 1) && !number(pos + 1)
                     ? pos + 1
                     : pos;
      if (inText(q) && !space(q) && !letter(q) && !number(q))
        e = run(run(q, [&](size_t p) { return !space(p) && !letter(p) && !number(p); }),
                [&](size_t p) { return newline(p) || c.cpt(p) == '/'; });
    }
    if (e == 0 && space(pos)) {
      size_t w = run(pos, space), lastNl = 0;
      for (size_t p = pos; p < w; ++p)
        if (newline(p))
          lastNl = p + 1;
      if (lastNl) // \s*[\r\n]+
        e = lastNl;
      else if (w == end || w - pos == 1) // \s+(?!\S) at the end, or \s+ of one
        e = w;
      else // \s+(?!\S): the last space goes to the next piece
        e = w - 1;
    }
    if (e == 0) // unreachable (every code point matches an alternative); keep the split total anyway
      e = pos + 1;
    out.push_back(e - pos);
    pos = e;
  }
}

/// A generic "runs of code points satisfying `pred`" regex (e.g. [\p{P}$+<=>^~|]+ or \p{N}+), maximal
/// runs of at most `maxRun` (0: unbounded), with the text between runs kept as pieces (as a regex split
/// that keeps unmatched text does).
template <typename Pred>
void splitRuns(const std::vector<uint32_t> &cpts, size_t begin, size_t end, Pred pred, size_t maxRun,
               std::vector<size_t> &out) {
  size_t pos = begin, gap = begin;
  while (pos < end) {
    if (!pred(cpts[pos])) {
      ++pos;
      continue;
    }
    size_t start = pos;
    while (pos < end && pred(cpts[pos]) && (maxRun == 0 || pos - start < maxRun))
      ++pos;
    if (maxRun != 0 && pos - start < maxRun)
      continue; // fixed-count pattern ([0-9]{3}): a shorter run is no match and stays in the gap
    if (start > gap)
      out.push_back(start - gap);
    out.push_back(pos - start);
    gap = pos;
  }
  if (end > gap)
    out.push_back(end - gap);
}

} // namespace

uint32_t flags(uint32_t cpt) {
  if (cpt >= 0x110000)
    return 0;
  const Range *first = std::begin(kRanges), *last = std::end(kRanges);
  const Range *it =
      std::upper_bound(first, last, cpt, [](uint32_t v, const Range &r) { return v < r.first; });
  return (it - 1)->flags;
}

size_t utf8Len(unsigned char b) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[b >> 4];
}

std::vector<uint32_t> decodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char b = s[i];
    size_t len = utf8Len(b);
    bool ok = len > 1 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      // A malformed byte classifies as U+FFFD (as in llama.cpp); preTokenize still cuts the original bytes.
      out.push_back(b < 0x80 ? b : 0xFFFD);
      ++i;
      continue;
    }
    uint32_t cpt = b & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k)
      cpt = (cpt << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cpt);
    i += len;
  }
  return out;
}

void appendUtf8(std::string &out, uint32_t cpt) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

std::vector<std::string> preTokenize(std::string_view text, std::string_view pre) {
  // Work in code points, but cut the original bytes: a malformed byte is one code point of one byte, so
  // byte offsets follow from the code point lengths.
  std::vector<uint32_t> cpts = decodeUtf8(text);
  std::vector<size_t> byteLen(cpts.size());
  {
    size_t i = 0, k = 0;
    while (i < text.size()) {
      unsigned char b = text[i];
      size_t len = utf8Len(b);
      bool ok = len > 1 && i + len <= text.size();
      for (size_t j = 1; ok && j < len; ++j)
        ok = (static_cast<unsigned char>(text[i + j]) & 0xC0) == 0x80;
      len = ok ? len : 1;
      byteLen[k++] = len;
      i += len;
    }
  }
  std::vector<size_t> pieces{cpts.size()};
  auto stage = [&](auto &&split) {
    std::vector<size_t> next;
    size_t start = 0;
    for (size_t len : pieces) {
      split(start, start + len, next);
      start += len;
    }
    pieces.swap(next);
  };
  if (pre == "llama3" || pre == "qwen2" || pre == "qwen35") {
    size_t maxDigits = pre == "llama3" ? 3 : 1;
    bool marks = pre == "qwen35";
    stage([&](size_t b, size_t e, std::vector<size_t> &o) { splitLlama3(cpts, b, e, maxDigits, marks, o); });
  } else if (pre == "gpt4o") {
    stage([&](size_t b, size_t e, std::vector<size_t> &o) { splitGpt4o(cpts, b, e, o); });
  } else if (pre == "gpt2") {
    stage([&](size_t b, size_t e, std::vector<size_t> &o) { splitGpt2(cpts, b, e, o); });
  } else {
    // llama.cpp's default BPE pre-tokenizer: four regexes applied in turn.
    auto punct = [](uint32_t c) {
      return (flags(c) & Punctuation) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
             c == '^' || c == '~' || c == '|';
    };
    stage([&](size_t b, size_t e, std::vector<size_t> &o) { splitRuns(cpts, b, e, punct, 0, o); });
    stage([&](size_t b, size_t e, std::vector<size_t> &o) { splitGpt2(cpts, b, e, o); });
    stage([&](size_t b, size_t e, std::vector<size_t> &o) {
      splitRuns(
          cpts, b, e, [](uint32_t c) { return (flags(c) & Number) != 0; }, 0, o);
    });
    stage([&](size_t b, size_t e, std::vector<size_t> &o) {
      splitRuns(
          cpts, b, e, [](uint32_t c) { return c >= '0' && c <= '9'; }, 3, o);
    });
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  size_t cp = 0, byte = 0;
  for (size_t len : pieces) {
    size_t bytes = 0;
    for (size_t k = 0; k < len; ++k)
      bytes += byteLen[cp + k];
    out.emplace_back(text.substr(byte, bytes));
    cp += len;
    byte += bytes;
  }
  return out;
}

} // namespace tpc::rt::unicode
