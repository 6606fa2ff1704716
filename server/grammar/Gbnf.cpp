//===- Gbnf.cpp - GBNF grammars (llama.cpp's grammar syntax) ---------------===//
//
// A recursive-descent parser over the text (errors carry the byte offset, turned into line and column at
// the end), building rules as lists of alternatives; then the checks (undefined rules, root, left
// recursion) and the flattening into Grammar's one element array. Learned from llama.cpp's
// llama-grammar.cpp (same syntax and repetition rewrite), written anew.
//===----------------------------------------------------------------------===//
#include "server/grammar/Gbnf.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tpc::server::grammar {

bool CharClass::matches(uint32_t c) const {
  bool in = false;
  for (const auto &[lo, hi] : ranges)
    if (c >= lo && c <= hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto &[a, b] : ranges)
      if (a <= hi && b >= lo)
        return true;
    return false;
  }
  // Negated: some point of [lo, hi] escapes every range (ranges are sorted and disjoint).
  uint32_t next = lo;
  for (const auto &[a, b] : ranges) {
    if (b < next)
      continue;
    if (a > next)
      return true;
    if (b >= hi)
      return false;
    next = b + 1;
  }
  return next <= hi;
}

bool CharClass::covers(uint32_t lo, uint32_t hi) const {
  if (negated) { // no excluded range may touch [lo, hi]
    for (const auto &[a, b] : ranges)
      if (a <= hi && b >= lo)
        return false;
    return true;
  }
  for (const auto &[a, b] : ranges) // merged ranges: one must hold all of it
    if (a <= lo && b >= hi)
      return true;
  return false;
}

namespace {

/// Repetition bounds, as llama.cpp's (a {0,1000000} would otherwise build a million rules).
constexpr uint64_t kMaxRepetition = 2000;
constexpr size_t kMaxElements = 1u << 20;
constexpr int kMaxNesting = 200;

struct ParseError : std::runtime_error {
  ParseError(size_t at, const std::string &what) : std::runtime_error(what), at(at) {}
  size_t at;
};

using Seq = std::vector<Element>;

class Parser {
public:
  explicit Parser(std::string_view src) : s_(src) {}

  std::shared_ptr<Grammar> run() {
    size_t p = space(0, true);
    while (p < s_.size())
      p = rule(p);
    return finish();
  }

private:
  std::string_view s_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> firstUse_;
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<CharClass> classes_;
  std::map<std::pair<std::vector<std::pair<uint32_t, uint32_t>>, bool>, uint32_t> classIds_;
  size_t elements_ = 0;
  int depth_ = 0; ///< open parentheses (the parser recurses on each)

  char at(size_t p) const { return p < s_.size() ? s_[p] : '\0'; }
  [[noreturn]] void fail(size_t p, const std::string &what) const { throw ParseError(p, what); }

  static bool wordChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  size_t space(size_t p, bool newlines) const {
    while (p < s_.size()) {
      const char c = s_[p];
      if (c == '#') {
        while (p < s_.size() && s_[p] != '\n' && s_[p] != '\r')
          ++p;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  uint32_t symbol(std::string_view name, size_t use) {
    auto it = ids_.find(name);
    if (it != ids_.end())
      return it->second;
    const uint32_t id = static_cast<uint32_t>(rules_.size());
    ids_.emplace(std::string(name), id);
    rules_.emplace_back();
    names_.emplace_back(name);
    defined_.push_back(false);
    firstUse_.push_back(use);
    return id;
  }

  uint32_t helper(uint32_t parent, size_t use) {
    // '~' cannot appear in a written name, so a helper never takes the name of a rule defined later.
    const std::string name = fmt::format("{}~{}", names_[parent], rules_.size());
    const uint32_t id = symbol(name, use);
    defined_[id] = true;
    return id;
  }

  void count(size_t p, size_t n) {
    elements_ += n;
    if (elements_ > kMaxElements)
      fail(p, fmt::format("the grammar grows past {} symbols (large repetition counts?)", kMaxElements));
  }

  uint32_t classId(CharClass c) {
    std::sort(c.ranges.begin(), c.ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto &r : c.ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    auto key = std::make_pair(merged, c.negated);
    auto it = classIds_.find(key);
    if (it != classIds_.end())
      return it->second;
    c.ranges = std::move(merged);
    classes_.push_back(std::move(c));
    const uint32_t id = static_cast<uint32_t>(classes_.size() - 1);
    classIds_.emplace(std::move(key), id);
    return id;
  }

  /// One UTF-8 character or escape at p; returns the code point and moves p.
  uint32_t character(size_t &p) {
    const size_t start = p;
    const unsigned char c = static_cast<unsigned char>(at(p));
    if (p >= s_.size())
      fail(p, "unexpected end of the grammar");
    if (c == '\\') {
      const char e = at(p + 1);
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          const char h = at(p + 2 + i);
          int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
          if (d < 0)
            fail(p, fmt::format("escape \\{} needs {} hex digits", e, n));
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > 0x10FFFF)
          fail(p, fmt::format("escape \\{}: U+{:X} is past U+10FFFF", e, v));
        p += 2 + n;
        return v;
      };
      switch (e) {
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      case 'n':
        p += 2;
        return '\n';
      case 'r':
        p += 2;
        return '\r';
      case 't':
        p += 2;
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        p += 2;
        return static_cast<uint32_t>(e);
      default:
        fail(p, fmt::format("unknown escape '\\{}' (use \\n \\r \\t \\\\ \\\" \\[ \\] \\xHH \\uHHHH)", e));
      }
    }
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || p + n > s_.size())
      fail(start, "invalid UTF-8 in the grammar");
    uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < n; ++i) {
      const unsigned char b = static_cast<unsigned char>(s_[p + i]);
      if ((b >> 6) != 2)
        fail(start, "invalid UTF-8 in the grammar");
      v = (v << 6) | (b & 0x3F);
    }
    p += n;
    return v;
  }

  size_t rule(size_t p) {
    const size_t nameStart = p;
    while (wordChar(at(p)))
      ++p;
    if (p == nameStart)
      fail(p, "expected a rule name");
    const std::string_view name = s_.substr(nameStart, p - nameStart);
    const uint32_t id = symbol(name, nameStart);
    if (defined_[id])
      fail(nameStart, fmt::format("rule '{}' is defined twice", name));
    defined_[id] = true;
    p = space(p, false);
    if (s_.substr(p, 3) != "::=")
      fail(p, fmt::format("expected '::=' after the rule name '{}'", name));
    p = alternates(space(p + 3, true), id, false);
    if (at(p) == '\r')
      p += at(p + 1) == '\n' ? 2 : 1;
    else if (at(p) == '\n')
      ++p;
    else if (p < s_.size())
      fail(p, fmt::format("unexpected '{}' in rule '{}' (expected a symbol, '|' or the end of the line)",
                          at(p), name));
    return space(p, true);
  }

  size_t alternates(size_t p, uint32_t id, bool nested) {
    std::vector<Seq> alts;
    alts.emplace_back();
    p = sequence(p, id, alts.back(), nested);
    while (at(p) == '|') {
      alts.emplace_back();
      p = sequence(space(p + 1, true), id, alts.back(), nested);
    }
    rules_[id] = std::move(alts);
    return p;
  }

  /// Wraps seq[from..] into a helper rule when it is more than one element, so a repetition applies to one.
  Element lastItem(Seq &seq, size_t from, uint32_t parent, size_t p) {
    if (seq.size() - from == 1) {
      Element e = seq.back();
      seq.pop_back();
      return e;
    }
    const uint32_t h = helper(parent, p);
    rules_[h] = {Seq(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end())};
    seq.resize(from);
    return {Element::Op::Rule, h};
  }

  void repeat(Seq &seq, size_t from, uint32_t parent, size_t p, uint64_t lo, uint64_t hi, bool unbounded) {
    if (from == seq.size())
      fail(p, "a repetition (* + ? {}) needs an item before it");
    if (lo > kMaxRepetition || (!unbounded && hi > kMaxRepetition))
      fail(p, fmt::format("repetition counts above {} are refused", kMaxRepetition));
    if (!unbounded && hi < lo)
      fail(p, fmt::format("repetition {{{},{}}}: the maximum is below the minimum", lo, hi));
    const Element item = lastItem(seq, from, parent, p);
    count(p, lo + (unbounded ? 3 : 3 * (hi - lo)));
    for (uint64_t i = 0; i < lo; ++i)
      seq.push_back(item);
    if (unbounded) { // star ::= item star | ""
      const uint32_t star = helper(parent, p);
      rules_[star] = {Seq{item, {Element::Op::Rule, star}}, Seq{}};
      seq.push_back({Element::Op::Rule, star});
      return;
    }
    // opt(k) ::= item opt(k-1) | "", opt(1) ::= item | ""
    uint32_t prev = 0;
    for (uint64_t k = 1; k <= hi - lo; ++k) {
      const uint32_t opt = helper(parent, p);
      Seq body{item};
      if (k > 1)
        body.push_back({Element::Op::Rule, prev});
      rules_[opt] = {std::move(body), Seq{}};
      prev = opt;
    }
    if (hi > lo)
      seq.push_back({Element::Op::Rule, prev});
  }

  uint64_t integer(size_t &p) {
    const size_t start = p;
    uint64_t v = 0;
    while (at(p) >= '0' && at(p) <= '9') {
      v = v * 10 + static_cast<uint64_t>(at(p) - '0');
      if (v > 1000000000)
        fail(start, "repetition count too large");
      ++p;
    }
    if (p == start)
      fail(p, "expected a number in the repetition {m,n}");
    return v;
  }

  size_t sequence(size_t p, uint32_t id, Seq &seq, bool nested) {
    size_t last = seq.size();
    for (;;) {
      const char c = at(p);
      if (p >= s_.size())
        break;
      if (c == '"') {
        last = seq.size();
        const size_t open = p++;
        while (at(p) != '"') {
          if (p >= s_.size() || at(p) == '\n')
            fail(open, "unterminated string literal");
          const uint32_t cp = character(p);
          count(p, 1);
          seq.push_back({Element::Op::Chars, classId(CharClass{{{cp, cp}}, false})});
        }
        p = space(p + 1, nested);
      } else if (c == '[') {
        last = seq.size();
        const size_t open = p++;
        CharClass cls;
        if (at(p) == '^')
          cls.negated = true, ++p;
        while (at(p) != ']') {
          if (p >= s_.size())
            fail(open, "unterminated character class '['");
          const uint32_t a = character(p);
          uint32_t b = a;
          if (at(p) == '-' && at(p + 1) != ']' && p + 1 < s_.size()) {
            ++p;
            b = character(p);
            if (b < a)
              fail(open, fmt::format("character range U+{:X}-U+{:X} is reversed", a, b));
          }
          cls.ranges.emplace_back(a, b);
        }
        count(p, 1);
        seq.push_back({Element::Op::Chars, classId(std::move(cls))});
        p = space(p + 1, nested);
      } else if (wordChar(c)) {
        last = seq.size();
        const size_t start = p;
        while (wordChar(at(p)))
          ++p;
        count(p, 1);
        seq.push_back({Element::Op::Rule, symbol(s_.substr(start, p - start), start)});
        p = space(p, nested);
      } else if (c == '(') {
        last = seq.size();
        const size_t open = p;
        if (++depth_ > kMaxNesting)
          fail(p, fmt::format("groups nested deeper than {}", kMaxNesting));
        const uint32_t g = helper(id, p);
        p = alternates(space(p + 1, true), g, true);
        if (at(p) != ')')
          fail(open, "unclosed '(' (expected ')')");
        --depth_;
        count(p, 1);
        seq.push_back({Element::Op::Rule, g});
        p = space(p + 1, nested);
      } else if (c == '.') {
        last = seq.size();
        count(p, 1);
        seq.push_back({Element::Op::Chars, classId(CharClass{{}, true})});
        p = space(p + 1, nested);
      } else if (c == '*' || c == '+' || c == '?') {
        repeat(seq, last, id, p, c == '+' ? 1 : 0, c == '?' ? 1 : 0, c != '?');
        p = space(p + 1, nested);
      } else if (c == '{') {
        const size_t open = p;
        p = space(p + 1, nested);
        const uint64_t lo = integer(p);
        p = space(p, nested);
        uint64_t hi = lo;
        bool unbounded = false;
        if (at(p) == ',') {
          p = space(p + 1, nested);
          if (at(p) >= '0' && at(p) <= '9') {
            hi = integer(p);
            p = space(p, nested);
          } else {
            unbounded = true;
          }
        }
        if (at(p) != '}')
          fail(p, "expected '}' to close the repetition {m,n}");
        repeat(seq, last, id, open, lo, hi, unbounded);
        p = space(p + 1, nested);
      } else {
        break;
      }
    }
    return p;
  }

  std::shared_ptr<Grammar> finish() {
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r])
        fail(firstUse_[r], fmt::format("undefined rule '{}'", names_[r]));
    auto root = ids_.find("root");
    if (root == ids_.end())
      fail(s_.size(), "the grammar has no 'root' rule (the start symbol)");
    checkLeftRecursion();
    auto g = std::make_shared<Grammar>();
    g->root = root->second;
    g->names = names_;
    g->classes = std::move(classes_);
    g->alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Seq &alt : rules_[r]) {
        g->alts[r].push_back(static_cast<uint32_t>(g->elems.size()));
        g->elems.insert(g->elems.end(), alt.begin(), alt.end());
        g->elems.push_back({Element::Op::End, 0});
      }
    return g;
  }

  void checkLeftRecursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r])
          continue;
        for (const Seq &alt : rules_[r])
          if (std::all_of(alt.begin(), alt.end(),
                          [&](const Element &e) { return e.op == Element::Op::Rule && nullable[e.arg]; })) {
            nullable[r] = changed = true;
            break;
          }
      }
    }
    // Edges r -> s: s can start r without a character read first.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r)
      for (const Seq &alt : rules_[r])
        for (const Element &e : alt) {
          if (e.op != Element::Op::Rule)
            break;
          left[r].push_back(e.arg);
          if (!nullable[e.arg])
            break;
        }
    std::vector<int> color(n, 0); // 0 new, 1 on the path, 2 done
    std::vector<uint32_t> path;
    // Depth-first with an explicit stack (a chain of a million rules must not overflow the C++ stack).
    for (uint32_t r0 = 0; r0 < n; ++r0) {
      if (color[r0] != 0)
        continue;
      std::vector<std::pair<uint32_t, size_t>> todo{{r0, 0}}; // rule, next edge
      color[r0] = 1;
      path.push_back(r0);
      while (!todo.empty()) {
        auto &[r, edge] = todo.back();
        if (edge == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          todo.pop_back();
          continue;
        }
        const uint32_t s = left[r][edge++];
        if (color[s] == 1) {
          std::string cycle;
          auto from = std::find(path.begin(), path.end(), s);
          for (auto it = from; it != path.end(); ++it)
            cycle += names_[*it] + " -> ";
          cycle += names_[s];
          fail(firstUse_[s],
               fmt::format("rule '{}' is left-recursive ({}); rewrite it with repetition", names_[s], cycle));
        }
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back(s);
          todo.push_back({s, 0});
        }
      }
    }
  }
};

} // namespace

Expected<std::shared_ptr<const Grammar>> parseGbnf(std::string_view text) {
  try {
    Parser parser(text);
    return std::shared_ptr<const Grammar>(parser.run());
  } catch (const ParseError &e) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < e.at && i < text.size(); ++i) {
      if (text[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    return Error{fmt::format("line {}, column {}: {}", line, col, e.what())};
  }
}

} // namespace tpc::server::grammar
