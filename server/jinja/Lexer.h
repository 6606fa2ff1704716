//===- Lexer.h - template text -> chunks and tokens (internal) ----*- C++ -*-===//
#ifndef TPC_SERVER_JINJA_LEXER_H
#define TPC_SERVER_JINJA_LEXER_H

#include <string>
#include <vector>

namespace tpc::server::jinja {

struct Token {
  enum T { Name, String, Int, Float, Op, End } t;
  std::string text;
  int line;
};

struct Chunk {
  enum T { Text, Var, Block } t;
  std::string text; ///< Text: the text; Var/Block: the tag's contents
  int line;
};


/// Cuts `src` into text and tags with the whitespace control applied (trim_blocks, lstrip_blocks, `-`).
std::vector<Chunk> cut(const std::string &src);
/// The tokens of one tag's contents; `line` is the tag's first line.
std::vector<Token> tokenize(const std::string &s, int line);

} // namespace tpc::server::jinja

#endif // TPC_SERVER_JINJA_LEXER_H
