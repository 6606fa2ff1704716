//===- Gbnf.h - GBNF grammars (llama.cpp's grammar syntax) ---------*- C++ -*-===//
//
// Parses a grammar in llama.cpp's GBNF syntax into a flat, immutable form the matcher (Matcher.h) runs:
//
//   root  ::= "{" ws pair ("," ws pair)* "}"      # rules: name ::= alternatives; `root` is the start
//   pair  ::= [a-z]+ ":" ws ( "true" | "false" )  # sequences, groups, alternation
//   ws    ::= [ \t\n]{0,20}                        # char classes, repetition * + ? {m} {m,} {m,n}
//
// Terminals: string literals "..." and classes [...] / [^...] with the escapes \n \r \t \\ \" \[ \] \xHH
// \uHHHH \UHHHHHHHH (and any UTF-8 character as itself); `.` is any character. Names are letters, digits,
// '-' and '_'. A rule ends at the end of its line unless inside parentheses or after '|'; '#' starts a
// comment. Repetition is rewritten into helper rules as llama.cpp does (x* -> x' ::= x x' | ""), with
// the same bound on the rules it may create.
//
// Checked at parse time, each error with its line and column: syntax, an undefined rule (at its first
// use), a missing `root`, and left recursion (a rule that can reach itself without reading a character,
// also through rules that match the empty string), which the matcher's expansion could not finish.
//
// The compiled form: every alternative of every rule is a run of Elements ending in End, all in one array,
// so a position in the grammar is one index. Chars elements refer to a CharClass; Rule elements to a rule.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_GRAMMAR_GBNF_H
#define TPC_SERVER_GRAMMAR_GBNF_H

#include "runtime/support/Expected.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpc::server::grammar {

/// A set of code points: sorted, disjoint, inclusive ranges, possibly negated.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  /// True when `c` is in the set.
  bool matches(uint32_t c) const;
  /// True when some code point of [lo, hi] is in the set (a partial UTF-8 sequence could still match).
  bool intersects(uint32_t lo, uint32_t hi) const;
  /// True when every code point of [lo, hi] is in the set.
  bool covers(uint32_t lo, uint32_t hi) const;
};

/// One symbol of an alternative.
struct Element {
  enum class Op : uint8_t { End, Rule, Chars } op = Op::End;
  uint32_t arg = 0; ///< Rule: the rule's index; Chars: the class's index
};

/// A parsed grammar (see the file comment). Immutable once built; shared by the requests that use it.
struct Grammar {
  std::vector<Element> elems;              ///< every alternative, each ended by End
  std::vector<std::vector<uint32_t>> alts; ///< per rule: the start index of each alternative
  std::vector<CharClass> classes;
  std::vector<std::string> names; ///< per rule (helper rules get "name~N")
  uint32_t root = 0;
};

/// Parses GBNF text; errors say "line L, column C: what" (and name the rule where it helps).
Expected<std::shared_ptr<const Grammar>> parseGbnf(std::string_view text);

} // namespace tpc::server::grammar

#endif // TPC_SERVER_GRAMMAR_GBNF_H
