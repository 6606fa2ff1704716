//===- Eval.cpp - statements and expressions -------------------------------===//
//
// Scopes follow jinja2: a for body and a macro call get their own scope (a `set` inside does not leak
// out), `if` does not. Undefined follows jinja2's default Undefined: it prints as "", is false and
// iterates as empty, but reading an attribute of it, calling it or doing arithmetic with it is an error.
//===----------------------------------------------------------------------===//
#include "server/jinja/Interp.h"

#include <fmt/format.h>

#include <cmath>

namespace tpc::server::jinja {

namespace {
[[noreturn]] void fail(const std::string &msg) { throw RenderError{msg}; }

std::string describe(const Expr &e) {
  switch (e.k) {
  case Expr::K::Name:
    return e.name;
  case Expr::K::Attr:
    return describe(*e.kids[0]) + "." + e.name;
  case Expr::K::Item:
    return describe(*e.kids[0]) + "[...]";
  case Expr::K::Call:
    return describe(*e.kids[0]) + "()";
  default:
    return "expression";
  }
}

int64_t floorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
} // namespace

void Interp::step() {
  if (++steps_ > limits_.maxSteps)
    fail("the template ran more than " + std::to_string(limits_.maxSteps) +
         " loop iterations and macro calls (a sandbox limit)");
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > limits_.maxSeconds)
    fail("the template ran longer than " + fmt::format("{:g}", limits_.maxSeconds) + " s (a sandbox limit)");
}

void Interp::checkSize(size_t n, const char *what) const {
  if (n > limits_.maxOutput)
    fail(std::string(what) + " passed " + std::to_string(limits_.maxOutput) + " bytes or items (a sandbox limit)");
}

void Interp::append(std::string &out, const std::string &s) {
  if (out.size() + s.size() > limits_.maxOutput)
    fail("the output passed " + std::to_string(limits_.maxOutput) + " bytes (a sandbox limit)");
  out += s;
}

// A block's filter chain ({% set x | f %}, {% filter f %}) was parsed with a null input at its root: the
// filters apply innermost first to the block's text.
Value Interp::filterBlock(const Expr &chainTop, Value v, const std::shared_ptr<Scope> &scope) {
  std::vector<const Expr *> chain;
  for (const Expr *f = &chainTop; f; f = f->kids[0].get())
    chain.push_back(f);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    Args args;
    for (size_t i = 1; i < (*it)->kids.size(); ++i)
      args.positional.push_back(eval(*(*it)->kids[i], scope));
    for (const auto &[k, e] : (*it)->kwargs)
      args.keyword.emplace_back(k, eval(*e, scope));
    v = filter((*it)->name, std::move(v), args);
  }
  return v;
}

Interp::Flow Interp::exec(const Body &body, std::string &out, const std::shared_ptr<Scope> &scope) {
  for (const auto &n : body) {
    Flow f;
    try {
      f = execNode(*n, out, scope);
    } catch (RenderError &e) {
      if (!e.line)
        e.line = n->line;
      throw;
    }
    if (f != Flow::Normal)
      return f;
  }
  return Flow::Normal;
}

namespace {
void bindTargets(Scope &s, const std::vector<std::string> &targets, const Value &v) {
  if (targets.size() == 1) {
    s.vars[targets[0]] = v;
    return;
  }
  if (!v.isList() || v.list().size() != targets.size())
    fail("cannot unpack " + v.typeName() + " into " + std::to_string(targets.size()) + " variables");
  for (size_t i = 0; i < targets.size(); ++i)
    s.vars[targets[i]] = v.list()[i];
}
} // namespace

Interp::Flow Interp::execNode(const Node &n, std::string &out, const std::shared_ptr<Scope> &scope) {
  switch (n.k) {
  case Node::K::Text:
    append(out, n.text);
    return Flow::Normal;
  case Node::K::Output:
    append(out, eval(*n.expr, scope).toString());
    return Flow::Normal;
  case Node::K::If:
    for (const auto &[cond, body] : n.branches)
      if (!cond || eval(*cond, scope).truthy())
        return exec(body, out, scope);
    return Flow::Normal;
  case Node::K::For: {
    const Value seq = eval(*n.expr, scope);
    List items = seq.iterate();
    if (n.filter) {
      List kept;
      for (const Value &v : items) {
        step();
        auto s = std::make_shared<Scope>();
        s->parent = scope;
        bindTargets(*s, n.targets, v);
        if (eval(*n.filter, s).truthy())
          kept.push_back(v);
      }
      items = std::move(kept);
    }
    if (items.empty())
      return n.elseBody.empty() ? Flow::Normal : exec(n.elseBody, out, scope);
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      step();
      auto s = std::make_shared<Scope>();
      s->parent = scope;
      bindTargets(*s, n.targets, items[i]);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i + 1 == len));
      loop.set("length", Value(len));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("loop.previtem"));
      loop.set("nextitem", i + 1 < len ? items[i + 1] : Value::undefined("loop.nextitem"));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("cycle", Value::function(
                            [i](Args &a) -> Value {
                              if (a.positional.empty())
                                fail("loop.cycle() needs at least one value");
                              return a.positional[i % a.positional.size()];
                            },
                            "loop.cycle"));
      s->vars["loop"] = Value(std::move(loop));
      if (exec(n.body, out, s) == Flow::Break)
        break;
    }
    return Flow::Normal;
  }
  case Node::K::Set: {
    Value v = eval(*n.expr, scope);
    if (n.target) {
      Value obj = eval(*n.target->kids[0], scope);
      if (!obj.isNamespace())
        fail("{% set " + describe(*n.target) + " %}: only a namespace() takes attribute assignment, not " +
             obj.typeName());
      obj.dict().set(Value(n.target->name), std::move(v));
    } else {
      bindTargets(*scope, n.targets, v);
    }
    return Flow::Normal;
  }
  case Node::K::SetBlock: {
    std::string text;
    exec(n.body, text, scope);
    Value v(std::move(text));
    if (n.filter)
      v = filterBlock(*n.filter, std::move(v), scope);
    scope->vars[n.targets[0]] = std::move(v);
    return Flow::Normal;
  }
  case Node::K::Filter: {
    std::string text;
    exec(n.body, text, scope);
    append(out, filterBlock(*n.filter, Value(std::move(text)), scope).toString());
    return Flow::Normal;
  }
  case Node::K::Macro:
    scope->vars[n.text] = makeMacro(n, scope);
    return Flow::Normal;
  case Node::K::CallBlock: {
    const Expr &c = *n.expr;
    Value fn = eval(*c.kids[0], scope);
    Args args;
    args.callee = describe(*c.kids[0]);
    for (size_t i = 1; i < c.kids.size(); ++i)
      args.positional.push_back(eval(*c.kids[i], scope));
    for (const auto &[k, e] : c.kwargs)
      args.keyword.emplace_back(k, eval(*e, scope));
    args.keyword.emplace_back("caller", makeMacro(n, scope));
    append(out, call(fn, args).toString());
    return Flow::Normal;
  }
  case Node::K::Break:
    return Flow::Break;
  case Node::K::Continue:
    return Flow::Continue;
  case Node::K::Block:
    return exec(n.body, out, scope);
  }
  return Flow::Normal;
}

Value Interp::makeMacro(const Node &n, const std::shared_ptr<Scope> &scope) {
  const Node *node = &n;
  std::shared_ptr<Scope> closure = scope;
  const std::string name = n.k == Node::K::Macro ? n.text : "caller";
  return Value::function(
      [this, node, closure, name](Args &a) -> Value {
        step();
        if (++depth_ > limits_.maxDepth)
          fail("macro '" + name + "' nested deeper than " + std::to_string(limits_.maxDepth) +
               " calls (a sandbox limit)");
        auto s = std::make_shared<Scope>();
        s->parent = closure;
        List varargs;
        for (size_t i = 0; i < a.positional.size(); ++i) {
          if (i < node->params.size())
            s->vars[node->params[i].first] = a.positional[i];
          else
            varargs.push_back(a.positional[i]);
        }
        Dict kwargs;
        for (auto &[k, v] : a.keyword) {
          bool known = k == "caller";
          for (const auto &p : node->params)
            known |= p.first == k;
          if (known)
            s->vars[k] = v;
          else
            kwargs.set(Value(k), v);
        }
        for (const auto &[p, def] : node->params)
          if (!s->vars.count(p))
            s->vars[p] = def ? eval(*def, s) : Value::undefined(p);
        s->vars["varargs"] = Value(std::move(varargs));
        s->vars["kwargs"] = Value(std::move(kwargs));
        std::string text;
        exec(node->body, text, s);
        --depth_;
        return Value(std::move(text));
      },
      name);
}

Value Interp::eval(const Expr &e, const std::shared_ptr<Scope> &scope) {
  try {
    switch (e.k) {
    case Expr::K::Literal:
      return e.lit;
    case Expr::K::Name:
      for (const Scope *s = scope.get(); s; s = s->parent.get())
        if (auto it = s->vars.find(e.name); it != s->vars.end())
          return it->second;
      return Value::undefined(e.name);
    case Expr::K::List:
    case Expr::K::Tuple: {
      List l;
      for (const auto &k : e.kids)
        l.push_back(eval(*k, scope));
      return e.k == Expr::K::Tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
    }
    case Expr::K::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2)
        d.set(eval(*e.kids[i], scope), eval(*e.kids[i + 1], scope));
      return Value(std::move(d));
    }
    case Expr::K::Attr: {
      const Value obj = eval(*e.kids[0], scope);
      if (obj.isUndefined())
        fail("'" + describe(*e.kids[0]) + "' is undefined (reading ." + e.name + ")");
      return attr(obj, e.name);
    }
    case Expr::K::Item: {
      const Value obj = eval(*e.kids[0], scope);
      if (obj.isUndefined())
        fail("'" + describe(*e.kids[0]) + "' is undefined (reading an item of it)");
      return item(obj, eval(*e.kids[1], scope));
    }
    case Expr::K::Slice: {
      const Value obj = eval(*e.kids[0], scope);
      Value b[3];
      for (int i = 0; i < 3; ++i)
        if (e.kids[i + 1])
          b[i] = eval(*e.kids[i + 1], scope);
      const bool isStr = obj.isString();
      if (!isStr && !obj.isList())
        fail("cannot slice a " + obj.typeName());
      const List seq = obj.iterate();
      const int64_t n = static_cast<int64_t>(seq.size());
      const int64_t stepv = b[2].isNumber() ? b[2].asInt() : 1;
      if (stepv == 0)
        fail("slice step cannot be zero");
      auto clamp = [&](const Value &v, int64_t dflt) -> int64_t {
        if (!v.isNumber())
          return dflt;
        int64_t i = v.asInt();
        if (i < 0)
          i += n;
        if (stepv > 0)
          return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
      };
      const int64_t start = clamp(b[0], stepv > 0 ? 0 : n - 1), stop = clamp(b[1], stepv > 0 ? n : -1);
      List outl;
      std::string outs;
      for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
        if (isStr)
          outs += seq[static_cast<size_t>(i)].str();
        else
          outl.push_back(seq[static_cast<size_t>(i)]);
      }
      return isStr ? Value(std::move(outs)) : Value(std::move(outl));
    }
    case Expr::K::Call: {
      Value fn = eval(*e.kids[0], scope);
      Args args;
      args.callee = describe(*e.kids[0]);
      for (size_t i = 1; i < e.kids.size(); ++i)
        args.positional.push_back(eval(*e.kids[i], scope));
      for (const auto &[k, v] : e.kwargs)
        args.keyword.emplace_back(k, eval(*v, scope));
      if (fn.isUndefined())
        fail("'" + args.callee + "' is undefined (called as a function)");
      return call(fn, args);
    }
    case Expr::K::Filter: {
      Value input = eval(*e.kids[0], scope);
      Args args;
      args.callee = e.name;
      for (size_t i = 1; i < e.kids.size(); ++i)
        args.positional.push_back(eval(*e.kids[i], scope));
      for (const auto &[k, v] : e.kwargs)
        args.keyword.emplace_back(k, eval(*v, scope));
      return filter(e.name, std::move(input), args);
    }
    case Expr::K::Test: {
      Value input = eval(*e.kids[0], scope);
      Args args;
      args.callee = e.name;
      for (size_t i = 1; i < e.kids.size(); ++i)
        args.positional.push_back(eval(*e.kids[i], scope));
      return Value(test(e.name, input, args) != e.negated);
    }
    case Expr::K::Neg:
    case Expr::K::Pos: {
      const Value v = eval(*e.kids[0], scope);
      if (!v.isNumber())
        fail(std::string("bad operand type for unary ") + (e.k == Expr::K::Neg ? "-" : "+") + ": " + v.typeName());
      if (e.k == Expr::K::Pos)
        return v;
      return v.isFloat() ? Value(-v.asFloat()) : Value(-v.asInt());
    }
    case Expr::K::Not:
      return Value(!eval(*e.kids[0], scope).truthy());
    case Expr::K::And: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? eval(*e.kids[1], scope) : a;
    }
    case Expr::K::Or: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? a : eval(*e.kids[1], scope);
    }
    case Expr::K::Cond:
      if (eval(*e.kids[1], scope).truthy())
        return eval(*e.kids[0], scope);
      return e.kids[2] ? eval(*e.kids[2], scope) : Value::undefined("the else branch");
    case Expr::K::Binary:
      return evalBinary(e, scope);
    }
  } catch (RenderError &err) {
    if (!err.line)
      err.line = e.line;
    throw;
  }
  return Value();
}

Value Interp::evalBinary(const Expr &e, const std::shared_ptr<Scope> &scope) {
  const std::string &op = e.name;
  const Value a = eval(*e.kids[0], scope);
  const Value b = eval(*e.kids[1], scope);
  if (op == "~") {
    std::string s = a.toString() + b.toString();
    if (s.size() > limits_.maxOutput)
      fail("a string passed " + std::to_string(limits_.maxOutput) + " bytes (a sandbox limit)");
    return Value(std::move(s));
  }
  if (op == "==")
    return Value(a == b);
  if (op == "!=")
    return Value(a != b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.isString()) {
      if (!a.isString())
        fail("'in <string>' requires a string on the left, not " + a.typeName());
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.isList()) {
      for (const Value &v : b.list())
        found |= v == a;
    } else if (b.isDict()) {
      found = b.dict().find(a) != nullptr;
    } else if (b.isUndefined()) {
      found = false; // jinja2's Undefined iterates as empty
    } else {
      fail("argument of type '" + b.typeName() + "' is not iterable");
    }
    return Value(op == "in" ? found : !found);
  }
  auto undefinedOperand = [&]() {
    const Expr &which = a.isUndefined() ? *e.kids[0] : *e.kids[1];
    fail("'" + describe(which) + "' is undefined (an operand of '" + op + "')");
  };
  if (a.isUndefined() || b.isUndefined())
    undefinedOperand();
  if (op == "<")
    return Value(a.less(b));
  if (op == ">")
    return Value(b.less(a));
  if (op == "<=")
    return Value(!b.less(a));
  if (op == ">=")
    return Value(!a.less(b));
  const bool nums = a.isNumber() && b.isNumber();
  const bool ints = nums && !a.isFloat() && !b.isFloat();
  if (op == "+") {
    if (ints)
      return Value(a.asInt() + b.asInt());
    if (nums)
      return Value(a.asFloat() + b.asFloat());
    if (a.isString() && b.isString()) {
      checkSize(a.str().size() + b.str().size(), "a string");
      if (a.isMarkup() || b.isMarkup()) // markupsafe: the plain operand is escaped
        return Value::markup((a.isMarkup() ? a.str() : htmlEscape(a.str())) +
                             (b.isMarkup() ? b.str() : htmlEscape(b.str())));
      return Value(a.str() + b.str());
    }
    if (a.isList() && b.isList()) {
      checkSize(a.list().size() + b.list().size(), "a list");
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  } else if (op == "-") {
    if (ints)
      return Value(a.asInt() - b.asInt());
    if (nums)
      return Value(a.asFloat() - b.asFloat());
  } else if (op == "*") {
    if (ints)
      return Value(a.asInt() * b.asInt());
    if (nums)
      return Value(a.asFloat() * b.asFloat());
    const Value &seq = a.isNumber() ? b : a;
    const Value &count = a.isNumber() ? a : b;
    if ((seq.isString() || seq.isList()) && count.isInt()) {
      const int64_t n = std::max<int64_t>(0, count.asInt());
      const size_t unit = seq.isString() ? seq.str().size() : seq.list().size();
      if (n > 0 && unit > limits_.maxOutput / static_cast<size_t>(n)) // no overflow of unit * n
        fail("a repeated sequence passed " + std::to_string(limits_.maxOutput) + " items (a sandbox limit)");
      if (seq.isString()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i)
          s += seq.str();
        return Value(std::move(s));
      }
      List l;
      for (int64_t i = 0; i < n; ++i)
        l.insert(l.end(), seq.list().begin(), seq.list().end());
      return Value(std::move(l));
    }
  } else if (op == "/" && nums) {
    if (b.asFloat() == 0)
      fail("division by zero");
    return Value(a.asFloat() / b.asFloat());
  } else if ((op == "//" || op == "%") && nums) {
    if (b.asFloat() == 0)
      fail(op == "//" ? "integer division by zero" : "modulo by zero");
    if (ints)
      return op == "//" ? Value(floorDiv(a.asInt(), b.asInt()))
                        : Value(a.asInt() - floorDiv(a.asInt(), b.asInt()) * b.asInt());
    const double q = std::floor(a.asFloat() / b.asFloat());
    return op == "//" ? Value(q) : Value(a.asFloat() - q * b.asFloat());
  } else if (op == "**" && nums) {
    if (ints && b.asInt() >= 0) {
      if (b.asInt() > 64)
        fail("an exponent over 64 (a sandbox limit)");
      int64_t r = 1;
      for (int64_t i = 0; i < b.asInt(); ++i)
        r *= a.asInt();
      return Value(r);
    }
    return Value(std::pow(a.asFloat(), b.asFloat()));
  }
  fail("unsupported operand types for " + op + ": '" + a.typeName() + "' and '" + b.typeName() + "'");
}

Expected<Template> Template::parse(const std::string &source) {
  try {
    Template t;
    t.body_ = std::make_shared<Body>(parseTemplate(source));
    return t;
  } catch (const RenderError &e) {
    return Error{"line " + std::to_string(e.line) + ": " + e.message};
  } catch (const std::exception &e) { // a library error the interpreter did not foresee: still no crash
    return Error{std::string("the template could not be parsed: ") + e.what()};
  }
}

Expected<std::string> Template::render(const Dict &context, const Limits &limits) const {
  auto globals = std::make_shared<Scope>();
  addBuiltinGlobals(*globals);
  auto top = std::make_shared<Scope>();
  top->parent = globals;
  for (const auto &[k, v] : context.items)
    top->vars[k.toString()] = v;
  Interp interp(limits, globals);
  std::string out;
  try {
    interp.exec(*body_, out, top);
  } catch (const RenderError &e) {
    return Error{"line " + std::to_string(e.line) + ": " + e.message};
  } catch (const std::exception &e) { // a library error the interpreter did not foresee: still no crash
    return Error{std::string("the template could not be rendered: ") + e.what()};
  }
  return out;
}

} // namespace tpc::server::jinja
