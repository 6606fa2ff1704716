//===- Parser.cpp - template text -> AST -----------------------------------===//
//
// The chunks and tokens of Lexer.cpp, parsed by recursive descent with jinja2's operator precedence:
//   cond (x if c else y) < or < and < not < compare (== != < > <= >= in, not in) < + - < ~ < * / // %
//   < ** < unary - + < primary with postfix (.attr [item] (call)) then filters (|f) and tests (is t).
//===----------------------------------------------------------------------===//
#include "server/jinja/Ast.h"
#include "server/jinja/Lexer.h"

#include <cstring>

namespace tpc::server::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string &msg) { throw RenderError{msg, line}; }

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
  /// As jinja2: `-x|f` is `(-x)|f`, the operand of a unary sign takes no filters of its own.
  ExprP parseUnary(bool withFilters = true) {
    if (peekOp("-") || peekOp("+")) {
      Nest nest(*this);
      const Token t = next();
      auto e = make(t.text == "-" ? Expr::K::Neg : Expr::K::Pos, t.line);
      e->kids.push_back(parseUnary(false));
      return withFilters ? parseFilters(std::move(e)) : std::move(e);
    }
    ExprP e = parsePostfix(parsePrimary());
    return withFilters ? parseFilters(std::move(e)) : std::move(e);
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
      try {
        return lit(Value(static_cast<int64_t>(std::stoll(t.text))));
      } catch (const std::out_of_range &) {
        error("the integer " + t.text + " does not fit in 64 bits");
      }
    case Token::Float:
      try {
        return lit(Value(std::stod(t.text)));
      } catch (const std::out_of_range &) {
        error("the number " + t.text + " is out of a double's range");
      }
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
