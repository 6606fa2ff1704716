//===- Value.h - the values a chat template computes with ---------*- C++ -*-===//
//
// Jinja's values are Python's: None, bool, int, float, str, list (and tuple), dict (ordered by insertion,
// as Python's), callables (macros, builtins), a namespace() and Undefined. Lists, dicts and namespaces are
// shared by reference, as in Python, so `{% set ns.x = ... %}` through one name is seen through another.
// str() and repr() follow Python's (a printed list is "['a', 1]"), because templates print such values.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_JINJA_VALUE_H
#define TPC_SERVER_JINJA_VALUE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpc::server::jinja {

class Value;
using List = std::vector<Value>;
/// A dict: insertion-ordered pairs (templates are small; linear lookup beats a hash map here).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value *find(const Value &key) const;
  void set(Value key, Value value);
};
struct Args;
/// A callable: a builtin function, a bound method or a macro.
using Function = std::function<Value(Args &)>;

/// A render-time error: the line is filled in by the evaluator from the node that failed.
struct RenderError {
  std::string message;
  int line = 0;
};

class Value {
public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function, Namespace };

  Value() = default; ///< Undefined
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int i) : kind_(Kind::Int), int_(i) {}
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}
  Value(size_t i) : kind_(Kind::Int), int_(static_cast<int64_t>(i)) {}
  Value(double d) : kind_(Kind::Float), float_(d) {}
  Value(std::string s) : kind_(Kind::String), str_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char *s) : Value(std::string(s)) {}
  Value(List l) : kind_(Kind::List), list_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : kind_(Kind::Dict), dict_(std::make_shared<Dict>(std::move(d))) {}
  static Value function(Function f, std::string name);
  /// A tuple: a list that prints as Python prints a tuple ("('a', 1)"); dict items are tuples.
  static Value tuple(List l) {
    Value v(std::move(l));
    v.tuple_ = true;
    return v;
  }
  /// A generator: what jinja2's map, select, selectattr, reject, rejectattr, unique, batch, items and
  /// reverse return. It iterates as its list, but as in Python it is always true, has no length and is not
  /// JSON serializable (`tools | map(...) | tojson` fails in jinja2, so it fails here).
  static Value generator(List l) {
    Value v(std::move(l));
    v.generator_ = true;
    return v;
  }
  /// A namespace(): a dict whose entries are attributes that `{% set ns.x %}` may assign.
  static Value ns(Dict d);
  /// Undefined, remembering the name or expression that was missing (for the error when it is used).
  static Value undefined(std::string what);
  /// From a JSON document (the request's messages and tools). Keep the order of object keys
  /// (nlohmann::ordered_json): templates print tools with tojson, in the order the client sent them.
  static Value fromJson(const nlohmann::ordered_json &j);
  static Value fromJson(const nlohmann::json &j);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Kind::Undefined; }
  bool isNone() const { return kind_ == Kind::None; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isInt() const { return kind_ == Kind::Int; }
  bool isFloat() const { return kind_ == Kind::Float; }
  bool isNumber() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool isString() const { return kind_ == Kind::String; }
  bool isList() const { return kind_ == Kind::List; }
  bool isDict() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }
  bool isTuple() const { return tuple_; }
  bool isGenerator() const { return generator_; }
  /// markupsafe's Markup (what `safe` and `escape` return): `Markup + str` escapes the str, as in Python.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  bool isMarkup() const { return markup_; }
  bool isCallable() const { return kind_ == Kind::Function; }
  bool isNamespace() const { return kind_ == Kind::Namespace; }

  int64_t asInt() const { return kind_ == Kind::Float ? static_cast<int64_t>(float_) : int_; }
  double asFloat() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string &str() const { return *str_; }
  List &list() const { return *list_; }
  Dict &dict() const { return *dict_; }
  const Function &fn() const { return *fn_; }
  /// The name of an Undefined (what was missing) or of a function.
  const std::string &name() const { return name_; }

  /// Python truthiness.
  bool truthy() const;
  /// Python str(): what {{ value }} prints.
  std::string toString() const;
  /// Python repr(): how a value prints inside a list or dict.
  std::string repr() const;
  /// Python ==.
  bool operator==(const Value &o) const;
  bool operator!=(const Value &o) const { return !(*this == o); }
  /// Python <, for sort and comparisons; throws RenderError for unordered types.
  bool less(const Value &o) const;
  /// Python's type name, for errors ("str", "list", "dict", "NoneType", ...).
  std::string typeName() const;
  /// The items an iteration over this value yields (a dict yields its keys, a string its characters).
  List iterate() const;
  /// transformers' tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
  /// `ensureAscii` writes non-ASCII characters as \uXXXX escapes (surrogate pairs past U+FFFF).
  std::string toJson(int indent, bool sortKeys, const std::string &itemSep, const std::string &keySep,
                     bool ensureAscii = false) const;

private:
  void jsonInto(std::string &out, int indent, int depth, bool sortKeys, const std::string &itemSep,
                const std::string &keySep, bool ensureAscii) const;
  Kind kind_ = Kind::Undefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  std::string name_;
  bool tuple_ = false;
  bool generator_ = false;
  bool markup_ = false;
};

/// Call arguments: positional, then keyword.
struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
  std::string callee; ///< for errors

  /// Argument `i` or keyword `kw`, or `fallback` when neither is given.
  Value get(size_t i, const char *kw, Value fallback = Value()) const;
  size_t size() const { return positional.size(); }
};

/// Python's repr of a string: single quotes unless the text holds one and no double quote.
std::string pyRepr(const std::string &s);
/// markupsafe's escape: & < > " ' as HTML entities.
std::string htmlEscape(const std::string &s);
/// Python's repr of a float ("1.0", "0.1", "1e-05").
std::string pyFloat(double d);

} // namespace tpc::server::jinja

#endif // TPC_SERVER_JINJA_VALUE_H
