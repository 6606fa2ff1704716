//===- Parser.cpp - template text -> AST -----------------------------------===//
//
// Two stages, as jinja2's lexer: the source is cut into text and tags ({{ }}, {% %}, {# #}) with the
// whitespace rules applied (`-` strips all whitespace on its side; lstrip_blocks strips the spaces before a
// block or comment tag that opens its line; trim_blocks drops the newline after one), then each tag's
// contents are tokenized and parsed by recursive descent with jinja2's operator precedence:
//   cond (x if c else y) < or < and < not < compare (== != < > <= >= in, not in) < + - < ~ < * / // %
//   < ** < unary - + < primary with postfix (.attr [item] (call)) then filters (|f) and tests (is t).
//===----------------------------------------------------------------------===//
#include "server/jinja/Ast.h"

#include <cstring>

namespace tpc::server::jinja {
namespace {

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

[[noreturn]] void fail(int line, const std::string &msg) { throw RenderError{msg, line}; }

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/// Cuts `src` into chunks with the whitespace control applied.
std::vector<Chunk> cut(const std::string &src) {
  std::vector<Chunk> out;
  size_t pos = 0;
  int line = 1;
  bool stripNext = false, trimNext = false;
  auto lineAt = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      line += src[i] == '\n';
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && !strchr("{%#", src[open + 1]))
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size())
      open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (stripNext) {
      size_t b = 0;
      while (b < text.size() && isSpace(text[b]))
        ++b;
      text.erase(0, b);
    } else if (trimNext && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    } else if (trimNext && text.size() > 1 && text[0] == '\r' && text[1] == '\n') {
      text.erase(0, 2);
    }
    const int textLine = line;
    if (open == std::string::npos) {
      if (!text.empty())
        out.push_back({Chunk::Text, text, textLine});
      break;
    }
    lineAt(pos, open);
    const char kind = src[open + 1];
    const bool minusLeft = open + 2 < src.size() && src[open + 2] == '-';
    const bool plusLeft = open + 2 < src.size() && src[open + 2] == '+';
    if (minusLeft) {
      while (!text.empty() && isSpace(text.back()))
        text.pop_back();
    } else if (kind != '{' && !plusLeft) {
      // lstrip_blocks: only when the tag is the first thing on its line (judged on the source text).
      size_t k = open;
      while (k > pos && (src[k - 1] == ' ' || src[k - 1] == '\t'))
        --k;
      const size_t n = open - k;
      if ((k == 0 || src[k - 1] == '\n') && n <= text.size())
        text.erase(text.size() - n);
    }
    if (!text.empty())
      out.push_back({Chunk::Text, text, textLine});
    const char *close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t bodyStart = open + 2 + (minusLeft || plusLeft);
    size_t end = src.find(close, bodyStart);
    // A "}}" or "%}" inside a string literal of the tag does not close it.
    if (kind != '#') {
      char quote = 0;
      size_t i = bodyStart;
      for (; i + 1 < src.size(); ++i) {
        const char c = src[i];
        if (quote) {
          if (c == '\\')
            ++i;
          else if (c == quote)
            quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (c == close[0] && src[i + 1] == close[1]) {
          break;
        }
      }
      end = i + 1 < src.size() ? i : std::string::npos;
    }
    if (end == std::string::npos)
      fail(line, std::string("unclosed '{") + kind + "': no '" + close + "' follows");
    const bool minusRight = end > bodyStart && src[end - 1] == '-';
    const bool plusRight = end > bodyStart && src[end - 1] == '+';
    std::string body = src.substr(bodyStart, end - bodyStart - (minusRight || plusRight));
    // {% raw %}: everything up to {% endraw %} is text.
    size_t b0 = 0;
    while (b0 < body.size() && isSpace(body[b0]))
      ++b0;
    if (kind == '%' && body.compare(b0, 3, "raw") == 0 && body.find_first_not_of(" \t\n", b0 + 3) == std::string::npos) {
      size_t e = end + 2;
      size_t rawEnd = e;
      for (;;) {
        rawEnd = src.find("{%", rawEnd);
        if (rawEnd == std::string::npos)
          fail(line, "{% raw %} has no {% endraw %}");
        size_t k = rawEnd + 2 + (src[rawEnd + 2] == '-');
        while (k < src.size() && isSpace(src[k]))
          ++k;
        if (src.compare(k, 6, "endraw") == 0)
          break;
        rawEnd += 2;
      }
      std::string raw = src.substr(e, rawEnd - e);
      if (minusRight)
        raw.erase(0, raw.find_first_not_of(" \t\n\r"));
      else if (!raw.empty() && raw[0] == '\n')
        raw.erase(0, 1);
      if (src[rawEnd + 2] == '-')
        while (!raw.empty() && isSpace(raw.back()))
          raw.pop_back();
      out.push_back({Chunk::Text, raw, line});
      const size_t rawClose = src.find("%}", rawEnd);
      if (rawClose == std::string::npos)
        fail(line, "unclosed {% endraw %}");
      lineAt(open, rawClose + 2);
      stripNext = src[rawClose - 1] == '-';
      trimNext = true;
      pos = rawClose + 2;
      continue;
    }
    if (kind != '#')
      out.push_back({kind == '{' ? Chunk::Var : Chunk::Block, body, line});
    lineAt(open, end + 2);
    stripNext = minusRight;
    trimNext = kind != '{' && !plusRight;
    pos = end + 2;
  }
  return out;
}

std::vector<Token> tokenize(const std::string &s, int line) {
  std::vector<Token> toks;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (isSpace(c)) {
      line += c == '\n';
      ++i;
    } else if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      toks.push_back({Token::Name, s.substr(i, j - i), line});
      i = j;
    } else if (isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool isFloat = false;
      while (j < s.size() && (isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      if (j + 1 < s.size() && s[j] == '.' && isdigit(static_cast<unsigned char>(s[j + 1]))) {
        isFloat = true;
        ++j;
        while (j < s.size() && isdigit(static_cast<unsigned char>(s[j])))
          ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1 + (j + 1 < s.size() && (s[j + 1] == '+' || s[j + 1] == '-'));
        if (k < s.size() && isdigit(static_cast<unsigned char>(s[k]))) {
          isFloat = true;
          j = k;
          while (j < s.size() && isdigit(static_cast<unsigned char>(s[j])))
            ++j;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_')
          num += s[k];
      toks.push_back({isFloat ? Token::Float : Token::Int, num, line});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          line += s[j] == '\n';
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '0': v += '\0'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break; // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + n >= s.size())
            fail(line, "truncated \\" + std::string(1, e) + " escape in a string");
          const uint32_t cp = static_cast<uint32_t>(std::stoul(s.substr(j + 1, n), nullptr, 16));
          j += n;
          if (cp < 0x80) {
            v += static_cast<char>(cp);
          } else if (cp < 0x800) {
            v += static_cast<char>(0xC0 | (cp >> 6));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            v += static_cast<char>(0xE0 | (cp >> 12));
            v += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            v += static_cast<char>(0xF0 | (cp >> 18));
            v += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            v += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            v += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: // Python keeps an unknown escape as written
          v += '\\';
          v += e;
        }
      }
      if (j >= s.size())
        fail(line, "unterminated string literal");
      toks.push_back({Token::String, v, line});
      i = j + 1;
    } else {
      static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                        "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
      const char *hit = nullptr;
      for (const char *op : ops)
        if (s.compare(i, strlen(op), op) == 0) {
          hit = op;
          break;
        }
      if (!hit)
        fail(line, std::string("unexpected character '") + c + "'");
      toks.push_back({Token::Op, hit, line});
      i += strlen(hit);
    }
  }
  toks.push_back({Token::End, "", line});
  return toks;
}

class Parser {
public:
  explicit Parser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  Body parseAll() {
    Body body = parseBody({});
    if (ci_ < chunks_.size())
      fail(chunks_[ci_].line, "unexpected '{% " + tagName(chunks_[ci_]) + " %}'");
    return body;
  }

private:
  std::vector<Chunk> chunks_;
  size_t ci_ = 0;
  std::vector<Token> toks_;
  size_t ti_ = 0;
  std::string tag_; ///< the statement being parsed, for errors
  int depth_ = 0;   ///< expression and block nesting: bounded, so a hostile template cannot overflow the stack

  struct Nest {
    Parser &p;
    explicit Nest(Parser &parser) : p(parser) {
      if (++p.depth_ > 200)
        p.error("nested deeper than 200 levels (a sandbox limit)");
    }
    ~Nest() { --p.depth_; }
  };

  static std::string tagName(const Chunk &c) {
    size_t b = c.text.find_first_not_of(" \t\n\r");
    if (b == std::string::npos)
      return "";
    size_t e = b;
    while (e < c.text.size() && (isalnum(static_cast<unsigned char>(c.text[e])) || c.text[e] == '_'))
      ++e;
    return c.text.substr(b, e - b);
  }

  // ---- statements ----

  /// Parses chunks until a block tag whose name is in `ends` (left unconsumed) or the end.
  Body parseBody(const std::vector<std::string> &ends) {
    Body body;
    while (ci_ < chunks_.size()) {
      const Chunk &c = chunks_[ci_];
      if (c.t == Chunk::Text) {
        auto n = std::make_unique<Node>();
        n->k = Node::K::Text;
        n->line = c.line;
        n->text = c.text;
        body.push_back(std::move(n));
        ++ci_;
        continue;
      }
      if (c.t == Chunk::Var) {
        start(c, "{{ }}");
        auto n = std::make_unique<Node>();
        n->k = Node::K::Output;
        n->line = c.line;
        n->expr = parseExpr();
        finish();
        body.push_back(std::move(n));
        continue;
      }
      const std::string name = tagName(c);
      for (const auto &e : ends)
        if (name == e)
          return body;
      body.push_back(parseStatement(name));
    }
    if (!ends.empty())
      fail(chunks_.empty() ? 1 : chunks_.back().line, "missing '{% " + ends.back() + " %}' (the template ends first)");
    return body;
  }

  void start(const Chunk &c, const std::string &what) {
    tag_ = what;
    toks_ = tokenize(c.text, c.line);
    ti_ = 0;
    ++ci_;
  }
  void finish() {
    if (peek().t != Token::End)
      error("unexpected '" + peek().text + "'");
  }
  /// Consumes the end tag named `name` (checked by parseBody).
  void endTag(const std::string &name) {
    start(chunks_[ci_], "{% " + name + " %}");
    next();
    finish();
  }
  [[noreturn]] void error(const std::string &msg) { fail(peek().line, tag_ + ": " + msg); }

  NodeP parseStatement(const std::string &name) {
    const Chunk &c = chunks_[ci_];
    start(c, "{% " + name + " %}");
    next();
    Nest nest(*this);
    auto n = std::make_unique<Node>();
    n->line = c.line;
    if (name == "if") {
      n->k = Node::K::If;
      ExprP cond = parseExpr();
      finish();
      for (;;) {
        Body b = parseBody({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        const std::string t = tagName(chunks_[ci_]);
        start(chunks_[ci_], "{% " + t + " %}");
        next();
        if (t == "endif") {
          finish();
          break;
        }
        if (t == "else") {
          finish();
          n->branches.emplace_back(nullptr, parseBody({"endif"}));
          endTag("endif");
          break;
        }
        cond = parseExpr();
        finish();
      }
    } else if (name == "for") {
      n->k = Node::K::For;
      n->targets = parseTargets();
      if (!accept("in"))
        error("expected 'in' after the loop variables");
      n->expr = parseExpr(false);
      if (accept("if"))
        n->filter = parseExpr(false);
      if (accept("recursive"))
        error("recursive loops are not supported");
      finish();
      n->body = parseBody({"else", "endfor"});
      if (tagName(chunks_[ci_]) == "else") {
        endTag("else");
        n->elseBody = parseBody({"endfor"});
      }
      endTag("endfor");
    } else if (name == "set") {
      if (peek().t != Token::Name)
        error("expected a variable name");
      std::string first = next().text;
      if (peekOp(".")) {
        next();
        if (peek().t != Token::Name)
          error("expected an attribute name after '.'");
        n->k = Node::K::Set;
        n->target = std::make_unique<Expr>();
        n->target->k = Expr::K::Attr;
        n->target->line = c.line;
        n->target->name = next().text;
        auto obj = std::make_unique<Expr>();
        obj->k = Expr::K::Name;
        obj->name = first;
        obj->line = c.line;
        n->target->kids.push_back(std::move(obj));
      } else {
        n->targets.push_back(first);
        while (peekOp(",")) {
          next();
          if (peek().t != Token::Name)
            error("expected a variable name after ','");
          n->targets.push_back(next().text);
        }
      }
      if (peekOp("=")) {
        next();
        n->k = Node::K::Set;
        n->expr = parseTupleOrExpr();
        finish();
      } else {
        if (n->target || n->targets.size() != 1)
          error("expected '='");
        n->k = Node::K::SetBlock;
        if (peekOp("|")) // {% set x | filter %}: the filter applies to the block
          n->filter = parseFilters(nullptr);
        finish();
        n->body = parseBody({"endset"});
        endTag("endset");
      }
    } else if (name == "macro") {
      n->k = Node::K::Macro;
      if (peek().t != Token::Name)
        error("expected the macro's name");
      n->text = next().text;
      n->params = parseParams();
      finish();
      n->body = parseBody({"endmacro"});
      endTag("endmacro");
    } else if (name == "call") {
      n->k = Node::K::CallBlock;
      if (peekOp("("))
        n->params = parseParams();
      n->expr = parseExpr();
      if (n->expr->k != Expr::K::Call)
        error("expected a macro call");
      finish();
      n->body = parseBody({"endcall"});
      endTag("endcall");
    } else if (name == "filter") {
      n->k = Node::K::Filter;
      n->filter = parseFilters(nullptr, true);
      finish();
      n->body = parseBody({"endfilter"});
      endTag("endfilter");
    } else if (name == "break" || name == "continue") {
      n->k = name == "break" ? Node::K::Break : Node::K::Continue;
      finish();
    } else if (name == "generation") { // transformers' AssistantTracker: renders its body
      n->k = Node::K::Block;
      finish();
      n->body = parseBody({"endgeneration"});
      endTag("endgeneration");
    } else if (name == "endif" || name == "endfor" || name == "endset" || name == "endmacro" || name == "endcall" ||
               name == "endfilter" || name == "endgeneration" || name == "endraw" || name == "else" ||
               name == "elif") {
      fail(c.line, "unexpected '{% " + name + " %}' (no open block takes it here)");
    } else {
      fail(c.line, "unknown tag '{% " + name + " %}' (this interpreter supports if, for, set, macro, call, "
                   "filter, break, continue, raw, generation)");
    }
    return n;
  }

  std::vector<std::string> parseTargets() {
    std::vector<std::string> names;
    const bool paren = peekOp("(");
    if (paren)
      next();
    do {
      if (peek().t != Token::Name)
        error("expected a variable name");
      names.push_back(next().text);
    } while (peekOp(",") && (next(), true));
    if (paren && !acceptOp(")"))
      error("expected ')'");
    return names;
  }

  std::vector<std::pair<std::string, ExprP>> parseParams() {
    std::vector<std::pair<std::string, ExprP>> params;
    if (!acceptOp("("))
      error("expected '(' and the parameters");
    while (!acceptOp(")")) {
      if (peek().t != Token::Name)
        error("expected a parameter name");
      std::string p = next().text;
      ExprP def;
      if (acceptOp("="))
        def = parseExpr();
      params.emplace_back(std::move(p), std::move(def));
      if (!peekOp(")") && !acceptOp(","))
        error("expected ',' or ')' in the parameters");
    }
    return params;
  }

  // ---- tokens ----
  const Token &peek(size_t ahead = 0) const { return toks_[std::min(ti_ + ahead, toks_.size() - 1)]; }
  Token next() { return toks_[ti_ < toks_.size() - 1 ? ti_++ : ti_]; }
  bool peekOp(const char *op, size_t ahead = 0) const { return peek(ahead).t == Token::Op && peek(ahead).text == op; }
  bool peekName(const char *n) const { return peek().t == Token::Name && peek().text == n; }
  bool acceptOp(const char *op) { return peekOp(op) && (next(), true); }
  bool accept(const char *name) { return peekName(name) && (next(), true); }
  void expectOp(const char *op) {
    if (!acceptOp(op))
      error(std::string("expected '") + op + "', got '" + peek().text + "'");
  }

  ExprP make(Expr::K k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }
  ExprP make2(Expr::K k, ExprP a, ExprP b, std::string name = {}) {
    auto e = make(k, a->line);
    e->name = std::move(name);
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }

  // ---- expressions ----
  ExprP parseTupleOrExpr() {
    ExprP first = parseExpr();
    if (!peekOp(","))
      return first;
    auto t = make(Expr::K::Tuple, first->line);
    t->kids.push_back(std::move(first));
    while (acceptOp(",")) {
      if (peek().t == Token::End)
        break;
      t->kids.push_back(parseExpr());
    }
    return t;
  }

  ExprP parseExpr(bool withCond = true) {
    Nest nest(*this);
    ExprP e = parseOr();
    while (withCond && peekName("if")) {
      next();
      ExprP cond = parseOr();
      ExprP other;
      if (accept("else"))
        other = parseExpr();
      auto c = make(Expr::K::Cond, e->line);
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  ExprP parseOr() {
    ExprP e = parseAnd();
    while (accept("or"))
      e = make2(Expr::K::Or, std::move(e), parseAnd());
    return e;
  }
  ExprP parseAnd() {
    ExprP e = parseNot();
    while (accept("and"))
      e = make2(Expr::K::And, std::move(e), parseNot());
    return e;
  }
  ExprP parseNot() {
    if (peekName("not")) {
      Nest nest(*this);
      const int line = next().line;
      auto e = make(Expr::K::Not, line);
      e->kids.push_back(parseNot());
      return e;
    }
    return parseCompare();
  }
  ExprP parseCompare() {
    ExprP e = parseMath1();
    for (;;) {
      static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">="};
      std::string op;
      for (const char *c : cmp)
        if (peekOp(c))
          op = c;
      if (!op.empty()) {
        next();
      } else if (peekName("in")) {
        next();
        op = "in";
      } else if (peekName("not") && peek(1).t == Token::Name && peek(1).text == "in") {
        next();
        next();
        op = "notin";
      } else {
        return e;
      }
      e = make2(Expr::K::Binary, std::move(e), parseMath1(), op);
    }
  }
  ExprP parseMath1() {
    ExprP e = parseConcat();
    while (peekOp("+") || peekOp("-")) {
      std::string op = next().text;
      e = make2(Expr::K::Binary, std::move(e), parseConcat(), op);
    }
    return e;
  }
  ExprP parseConcat() {
    ExprP e = parseMath2();
    while (acceptOp("~"))
      e = make2(Expr::K::Binary, std::move(e), parseMath2(), "~");
    return e;
  }
  ExprP parseMath2() {
    ExprP e = parsePow();
    while (peekOp("*") || peekOp("/") || peekOp("//") || peekOp("%")) {
      std::string op = next().text;
      e = make2(Expr::K::Binary, std::move(e), parsePow(), op);
    }
    return e;
  }
  ExprP parsePow() {
    ExprP e = parseUnary();
    while (acceptOp("**"))
      e = make2(Expr::K::Binary, std::move(e), parseUnary(), "**");
    return e;
  }
  ExprP parseUnary() {
    if (peekOp("-") || peekOp("+")) {
      Nest nest(*this);
      const Token t = next();
      auto e = make(t.text == "-" ? Expr::K::Neg : Expr::K::Pos, t.line);
      e->kids.push_back(parseUnary());
      return parseFilters(std::move(e));
    }
    return parseFilters(parsePostfix(parsePrimary()));
  }

  /// Filters and tests after an operand (`input` null: a {% filter %} block's filter chain).
  ExprP parseFilters(ExprP input, bool single = false) {
    for (;;) {
      if (peekOp("|") || (single && !input)) {
        if (peekOp("|"))
          next();
        if (peek().t != Token::Name)
          error("expected a filter name");
        const Token t = next();
        std::string name = t.text;
        while (peekOp(".") && peek(1).t == Token::Name) { // dotted filter names do not exist; keep the error clear
          next();
          name += "." + next().text;
        }
        auto f = make(Expr::K::Filter, t.line);
        f->name = name;
        f->kids.push_back(std::move(input));
        if (peekOp("("))
          parseCallArgs(*f);
        input = std::move(f);
        if (single && !peekOp("|"))
          return input;
      } else if (input && peekName("is")) {
        const int line = next().line;
        auto t = make(Expr::K::Test, line);
        t->negated = accept("not");
        if (peek().t != Token::Name)
          error("expected a test name after 'is'");
        t->name = next().text;
        t->kids.push_back(std::move(input));
        if (peekOp("(")) {
          parseCallArgs(*t);
        } else if ((peek().t == Token::Name && !peekName("else") && !peekName("or") && !peekName("and") &&
                    !peekName("if") && !peekName("in") && !peekName("not") && !peekName("is")) ||
                   peek().t == Token::String || peek().t == Token::Int || peek().t == Token::Float) {
          t->kids.push_back(parsePostfix(parsePrimary())); // `x is divisibleby 3`
        }
        input = std::move(t);
      } else {
        return input;
      }
    }
  }

  void parseCallArgs(Expr &call) {
    expectOp("(");
    while (!acceptOp(")")) {
      if (peek().t == Token::Name && peekOp("=", 1)) {
        std::string kw = next().text;
        next();
        call.kwargs.emplace_back(std::move(kw), parseExpr());
      } else {
        if (!call.kwargs.empty())
          error("a positional argument follows a keyword argument");
        call.kids.push_back(parseExpr());
      }
      if (!peekOp(")") && !acceptOp(","))
        error("expected ',' or ')' in the arguments, got '" + peek().text + "'");
    }
  }

  ExprP parsePostfix(ExprP e) {
    for (;;) {
      if (peekOp(".")) {
        next();
        if (peek().t != Token::Name && peek().t != Token::Int)
          error("expected an attribute name after '.'");
        auto a = make(Expr::K::Attr, e->line);
        a->name = next().text;
        a->kids.push_back(std::move(e));
        e = std::move(a);
      } else if (peekOp("[")) {
        next();
        ExprP parts[3];
        bool slice = false;
        for (int i = 0; i < 3; ++i) {
          if (!peekOp(":") && !peekOp("]"))
            parts[i] = parseExpr();
          if (i < 2 && acceptOp(":"))
            slice = true;
          else
            break;
        }
        expectOp("]");
        auto it = make(slice ? Expr::K::Slice : Expr::K::Item, e->line);
        it->kids.push_back(std::move(e));
        if (!slice && !parts[0])
          error("expected an index inside '[]'");
        it->kids.push_back(std::move(parts[0]));
        if (slice) {
          it->kids.push_back(std::move(parts[1]));
          it->kids.push_back(std::move(parts[2]));
        }
        e = std::move(it);
      } else if (peekOp("(")) {
        auto c = make(Expr::K::Call, e->line);
        c->kids.push_back(std::move(e));
        parseCallArgs(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprP parsePrimary() {
    const Token t = peek();
    if (t.t == Token::End)
      error("expected an expression, the tag ends");
    next();
    auto lit = [&](Value v) {
      auto e = make(Expr::K::Literal, t.line);
      e->lit = std::move(v);
      return e;
    };
    switch (t.t) {
    case Token::String: {
      std::string s = t.text;
      while (peek().t == Token::String) // adjacent literals concatenate, as in Python
        s += next().text;
      return lit(Value(s));
    }
    case Token::Int:
      return lit(Value(static_cast<int64_t>(std::stoll(t.text))));
    case Token::Float:
      return lit(Value(std::stod(t.text)));
    case Token::Name:
      if (t.text == "true" || t.text == "True")
        return lit(Value(true));
      if (t.text == "false" || t.text == "False")
        return lit(Value(false));
      if (t.text == "none" || t.text == "None")
        return lit(Value::none());
      {
        auto e = make(Expr::K::Name, t.line);
        e->name = t.text;
        return e;
      }
    default:
      break;
    }
    if (t.text == "(") {
      if (acceptOp(")"))
        return make(Expr::K::Tuple, t.line);
      ExprP e = parseExpr();
      if (peekOp(",")) {
        auto tup = make(Expr::K::Tuple, t.line);
        tup->kids.push_back(std::move(e));
        while (acceptOp(",") && !peekOp(")"))
          tup->kids.push_back(parseExpr());
        e = std::move(tup);
      }
      expectOp(")");
      return e;
    }
    if (t.text == "[") {
      auto l = make(Expr::K::List, t.line);
      while (!acceptOp("]")) {
        l->kids.push_back(parseExpr());
        if (!peekOp("]") && !acceptOp(","))
          error("expected ',' or ']' in a list");
      }
      return l;
    }
    if (t.text == "{") {
      auto d = make(Expr::K::Dict, t.line);
      while (!acceptOp("}")) {
        d->kids.push_back(parseExpr());
        expectOp(":");
        d->kids.push_back(parseExpr());
        if (!peekOp("}") && !acceptOp(","))
          error("expected ',' or '}' in a dict");
      }
      return d;
    }
    fail(t.line, tag_ + ": unexpected '" + t.text + "'");
  }
};

} // namespace

Body parseTemplate(const std::string &source) { return Parser(cut(source)).parseAll(); }

} // namespace tpc::server::jinja
