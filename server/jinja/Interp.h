//===- Interp.h - the evaluator's state (internal to server/jinja) -*- C++ -*-===//
#ifndef TPC_SERVER_JINJA_INTERP_H
#define TPC_SERVER_JINJA_INTERP_H

#include "server/jinja/Ast.h"
#include "server/jinja/Template.h"

#include <chrono>
#include <map>
#include <memory>

namespace tpc::server::jinja {

/// Variables of one scope: the template's top level, a for body, a macro call.
struct Scope {
  std::map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interp {
public:
  Interp(const Limits &limits, std::shared_ptr<Scope> globals) : limits_(limits), globals_(std::move(globals)) {}

  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body &body, std::string &out, const std::shared_ptr<Scope> &scope);
  Value eval(const Expr &e, const std::shared_ptr<Scope> &scope);

  /// Filters, tests, methods and globals (Builtins.cpp). `line` names the caller in errors.
  Value filter(const std::string &name, Value input, Args &args);
  /// The filter chain of a set or filter block (its root a null input) applied to the block's text `v`.
  Value filterBlock(const Expr &chainTop, Value v, const std::shared_ptr<Scope> &scope);
  bool test(const std::string &name, const Value &input, Args &args);
  /// obj.name: a dict entry, a method bound to obj, or Undefined.
  Value attr(const Value &obj, const std::string &name);
  /// obj[key].
  Value item(const Value &obj, const Value &key);
  /// Calls a callable value (a builtin or a macro).
  Value call(const Value &fn, Args &args);
  /// One step of work: a loop iteration or a macro call; throws once the limit is spent.
  void step();
  /// Throws when a string or list about to be built would pass the output limit (so no operator can
  /// double a value past memory).
  void checkSize(size_t n, const char *what) const;

  const Limits &limits() const { return limits_; }

private:
  Flow execNode(const Node &n, std::string &out, const std::shared_ptr<Scope> &scope);
  Value evalBinary(const Expr &e, const std::shared_ptr<Scope> &scope);
  Value makeMacro(const Node &n, const std::shared_ptr<Scope> &scope);
  void append(std::string &out, const std::string &s);

  const Limits &limits_;
  std::shared_ptr<Scope> globals_;
  size_t steps_ = 0;
  int depth_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// The globals every template sees: range, namespace, dict, raise_exception, strftime_now (the clock).
void addBuiltinGlobals(Scope &scope);

/// Python's str.strip family: `chars` empty strips whitespace.
std::string pyStrip(const std::string &s, const std::string &chars, bool left, bool right);

} // namespace tpc::server::jinja

#endif // TPC_SERVER_JINJA_INTERP_H
