//===- Filters.cpp - jinja2's filters and tests ----------------------------===//
//
// Each filter follows jinja2 3.1's definition (jinja2/filters.py, jinja2/tests.py); `tojson` is
// transformers' override: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) with Python's
// default separators (", ", ": ") or (",", ": ") when indenting, and no HTML escaping.
//===----------------------------------------------------------------------===//
#include "server/jinja/Interp.h"

#include <algorithm>
#include <cmath>

namespace tpc::server::jinja {

namespace {
[[noreturn]] void fail(const std::string &msg) { throw RenderError{msg}; }

/// An attribute path "a.b" or an index, as jinja2's make_attrgetter reads it.
Value getPath(Interp &in, const Value &obj, const Value &path) {
  if (path.isInt())
    return in.item(obj, path);
  Value cur = obj;
  std::string p = path.toString();
  size_t i = 0;
  while (true) {
    const size_t e = p.find('.', i);
    const std::string part = p.substr(i, e == std::string::npos ? std::string::npos : e - i);
    const bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.isUndefined())
      return cur;
    cur = in.item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (e == std::string::npos)
      return cur;
    i = e + 1;
  }
}

} // namespace

bool Interp::test(const std::string &name, const Value &v, Args &a) {
  auto arg = [&]() {
    if (a.positional.empty())
      fail("test '" + name + "' needs an argument");
    return a.positional[0];
  };
  if (name == "defined")
    return !v.isUndefined();
  if (name == "undefined")
    return v.isUndefined();
  if (name == "none")
    return v.isNone();
  if (name == "string")
    return v.isString();
  if (name == "number")
    return v.isInt() || v.isFloat();
  if (name == "integer")
    return v.isInt();
  if (name == "float")
    return v.isFloat();
  if (name == "boolean")
    return v.isBool();
  if (name == "true")
    return v.isBool() && v.asInt();
  if (name == "false")
    return v.isBool() && !v.asInt();
  if (name == "mapping")
    return v.kind() == Value::Kind::Dict;
  if (name == "iterable")
    return v.isList() || v.isString() || v.kind() == Value::Kind::Dict;
  if (name == "sequence")
    return v.isList() || v.isString() || v.kind() == Value::Kind::Dict;
  if (name == "callable")
    return v.isCallable();
  if (name == "odd" || name == "even") {
    if (!v.isNumber())
      fail("test '" + name + "' needs a number, not " + v.typeName());
    return (((v.asInt() % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby")
    return arg().asInt() != 0 && v.asInt() % arg().asInt() == 0;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return v == arg();
  if (name == "ne" || name == "!=")
    return v != arg();
  if (name == "lt" || name == "lessthan" || name == "<")
    return v.less(arg());
  if (name == "gt" || name == "greaterthan" || name == ">")
    return arg().less(v);
  if (name == "le" || name == "<=")
    return !arg().less(v);
  if (name == "ge" || name == ">=")
    return !v.less(arg());
  if (name == "in") {
    const Value c = arg();
    if (c.isString())
      return v.isString() && c.str().find(v.str()) != std::string::npos;
    if (c.isDict())
      return c.dict().find(v) != nullptr;
    for (const Value &x : c.iterate())
      if (x == v)
        return true;
    return false;
  }
  if (name == "lower" || name == "upper") {
    if (!v.isString())
      return false;
    Args none;
    return attr(v, name == "lower" ? "islower" : "isupper").fn()(none).truthy();
  }
  fail("unknown test '" + name + "'");
}

Value Interp::filter(const std::string &name, Value v, Args &a) {
  auto needList = [&]() {
    if (v.isUndefined())
      return List{};
    return v.iterate();
  };
  // jinja2's map/select/reject family start with `if value:`: none or an empty value gives nothing.
  auto ifValue = [&]() { return v.truthy() ? v.iterate() : List{}; };
  if (name == "safe")
    return v.isMarkup() ? v : Value::markup(v.toString());
  if ((name == "list" && v.isList() && !v.isTuple() && !v.isGenerator()))
    return v;
  if (name == "string")
    return Value(v.toString());
  if (name == "trim") {
    const Value chars = a.get(0, "chars", Value::none());
    return Value(pyStrip(v.toString(), chars.isString() ? chars.str() : "", true, true));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    Args none;
    return attr(Value(v.toString()), name).fn()(none);
  }
  if (name == "length" || name == "count") {
    if (v.isGenerator())
      fail("filter '" + name + "': object of type 'generator' has no len()");
    if (v.isString() || v.isList() || v.isDict() || v.isUndefined())
      return Value(v.iterate().size());
    fail("filter 'length': object of type '" + v.typeName() + "' has no len()");
  }
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean", Value(false)).truthy();
    if (v.isUndefined() || (boolean && !v.truthy()))
      return a.get(0, "default_value", Value(""));
    return v;
  }
  if (name == "join") {
    const std::string sep = a.get(0, "d", Value("")).toString();
    const Value attribute = a.get(1, "attribute", Value::none());
    std::string out;
    const List items = needList();
    for (size_t i = 0; i < items.size(); ++i)
      out += (i ? sep : "") + (attribute.isNone() ? items[i] : getPath(*this, items[i], attribute)).toString();
    return Value(std::move(out));
  }
  if (name == "replace") {
    Args b;
    b.positional = {a.get(0, "old"), a.get(1, "new"), a.get(2, "count", Value(-1))};
    return attr(Value(v.toString()), "replace").fn()(b);
  }
  if (name == "items") {
    if (v.isUndefined())
      return Value(List{});
    if (!v.isDict())
      fail("filter 'items' needs a mapping, not " + v.typeName());
    Args none;
    return Value::generator(attr(v, "items").fn()(none).list());
  }
  if (name == "first" || name == "last") {
    if (name == "last" && v.isGenerator())
      fail("filter 'last': 'generator' object is not reversible");
    const List items = needList();
    if (items.empty())
      return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list")
    return Value(needList());
  if (name == "reverse") {
    if (v.isString()) {
      List chars = v.iterate();
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it)
        out += it->str();
      return Value(std::move(out));
    }
    List items = needList();
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items)); // Python: a list_reverseiterator
  }
  if (name == "int")
    return Value(v.isNumber() ? v.asInt() : [&] {
      const Value d = a.get(0, "default", Value(0));
      if (!v.isString())
        return d.asInt();
      try {
        size_t used = 0;
        const std::string s = pyStrip(v.str(), "", true, true);
        const int64_t r = std::stoll(s, &used);
        if (used == s.size())
          return r;
        const double f = std::stod(s, &used);
        if (used == s.size())
          return static_cast<int64_t>(f);
      } catch (...) {
      }
      return d.asInt();
    }());
  if (name == "float") {
    if (v.isNumber())
      return Value(v.asFloat());
    try {
      return Value(std::stod(v.toString()));
    } catch (...) {
      return Value(a.get(0, "default", Value(0.0)).asFloat());
    }
  }
  if (name == "abs") {
    if (!v.isNumber())
      fail("filter 'abs' needs a number");
    return v.isFloat() ? Value(std::fabs(v.asFloat())) : Value(v.asInt() < 0 ? -v.asInt() : v.asInt());
  }
  if (name == "round") {
    const int64_t prec = a.get(0, "precision", Value(0)).asInt();
    const std::string method = a.get(1, "method", Value("common")).toString();
    const double m = std::pow(10.0, static_cast<double>(prec));
    const double x = v.asFloat() * m;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value(r / m);
  }
  if (name == "tojson") {
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    const bool ensureAscii = a.get(0, "ensure_ascii", Value(false)).truthy();
    const Value indent = a.get(1, "indent", Value::none());
    const Value seps = a.get(2, "separators", Value::none());
    const bool sortKeys = a.get(3, "sort_keys", Value(false)).truthy();
    std::string itemSep = indent.isNone() ? ", " : ",", keySep = ": ";
    if (seps.isList() && seps.list().size() == 2) {
      itemSep = seps.list()[0].toString();
      keySep = seps.list()[1].toString();
    }
    if (v.isUndefined())
      fail("filter 'tojson': Object of type Undefined is not JSON serializable");
    return Value(v.toJson(indent.isNone() ? -1 : static_cast<int>(indent.asInt()), sortKeys, itemSep, keySep,
                          ensureAscii));
  }
  if (name == "indent") {
    const Value w = a.get(0, "width", Value(4));
    if (!w.isString())
      checkSize(static_cast<size_t>(std::max<int64_t>(0, w.asInt())), "filter 'indent'");
    const std::string ind = w.isString() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.asInt())), ' ');
    const bool first = a.get(1, "first", Value(false)).truthy();
    const bool blank = a.get(2, "blank", Value(false)).truthy();
    Args none;
    const List lines = attr(Value(v.toString() + "\n"), "splitlines").fn()(none).list();
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string &l = lines[i].str();
      if (i == 0)
        out = l;
      else
        out += "\n" + ((blank || !l.empty()) ? ind + l : l);
    }
    return Value(first ? ind + out : out);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool byAttr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "selectattr" || name == "select";
    const size_t first = byAttr ? 1 : 0;
    const Value attribute = byAttr ? a.get(0, "attribute") : Value();
    Args targs;
    std::string tname;
    if (a.positional.size() > first) {
      tname = a.positional[first].toString();
      targs.positional.assign(a.positional.begin() + static_cast<long>(first) + 1, a.positional.end());
    }
    List out;
    for (const Value &x : ifValue()) {
      const Value probe = byAttr ? getPath(*this, x, attribute) : x;
      const bool t = tname.empty() ? probe.truthy() : test(tname, probe, targs);
      if (t == keep)
        out.push_back(x);
    }
    return Value::generator(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value attribute = a.get(static_cast<size_t>(-1), "attribute");
    if (!attribute.isUndefined()) {
      const Value dflt = a.get(static_cast<size_t>(-1), "default");
      for (const Value &x : ifValue()) {
        Value r = getPath(*this, x, attribute);
        out.push_back(r.isUndefined() && !dflt.isUndefined() ? dflt : r);
      }
      return Value::generator(std::move(out));
    }
    if (a.positional.empty())
      fail("filter 'map' needs a filter name or attribute=");
    const std::string f = a.positional[0].toString();
    Args fargs;
    fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
    fargs.keyword = a.keyword;
    for (const Value &x : ifValue())
      out.push_back(filter(f, x, fargs));
    return Value::generator(std::move(out));
  }
  if (name == "unique") {
    List out;
    for (const Value &x : needList())
      if (std::find(out.begin(), out.end(), x) == out.end())
        out.push_back(x);
    return Value::generator(std::move(out));
  }
  if (name == "sort" || name == "dictsort") {
    const bool dict = name == "dictsort";
    const bool reverse = a.get(dict ? 2 : 0, "reverse", Value(false)).truthy();
    const Value attribute = a.get(dict ? 99 : 2, "attribute", Value::none());
    const bool byValue = dict && a.get(1, "by", Value("key")).toString() == "value";
    List items;
    if (dict) {
      Args none;
      items = attr(v, "items").fn()(none).list();
    } else {
      items = needList();
    }
    auto key = [&](const Value &x) -> Value {
      Value k = dict ? x.list()[byValue ? 1 : 0] : attribute.isNone() ? x : getPath(*this, x, attribute);
      return k.isString() ? Value(std::string([&] {
        std::string s = k.str();
        for (char &c : s)
          c = static_cast<char>(tolower(static_cast<unsigned char>(c))); // case_sensitive=False
        return s;
      }())) : k;
    };
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value &x, const Value &y) { return reverse ? key(y).less(key(x)) : key(x).less(key(y)); });
    return Value(std::move(items));
  }
  if (name == "sum") {
    const Value attribute = a.get(0, "attribute", Value::none());
    Value total = a.get(1, "start", Value(0));
    for (const Value &x : needList()) {
      const Value y = attribute.isNone() ? x : getPath(*this, x, attribute);
      total = total.isFloat() || y.isFloat() ? Value(total.asFloat() + y.asFloat()) : Value(total.asInt() + y.asInt());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const List items = needList();
    if (items.empty())
      return Value::undefined(name);
    Value best = items[0];
    for (const Value &x : items)
      if (name == "min" ? x.less(best) : best.less(x))
        best = x;
    return best;
  }
  if (name == "escape" || name == "e")
    return v.isMarkup() ? v : Value::markup(htmlEscape(v.toString()));
  if (name == "wordcount") {
    Args none;
    return Value(attr(Value(v.toString()), "split").fn()(none).list().size());
  }
  if (name == "center") {
    const int64_t w = a.get(0, "width", Value(80)).asInt();
    std::string s = v.toString();
    const int64_t n = static_cast<int64_t>(s.size());
    if (w <= n)
      return Value(s);
    checkSize(static_cast<size_t>(w), "filter 'center'");
    const int64_t left = (w - n) / 2 + ((w - n) % 2 & w % 2);
    return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(w - n - left), ' '));
  }
  if (name == "batch") {
    const int64_t n = a.get(0, "linecount").asInt();
    if (n <= 0)
      fail("filter 'batch' needs a positive size");
    List out, cur;
    for (const Value &x : needList()) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == n) {
        out.push_back(Value(cur));
        cur.clear();
      }
    }
    if (!cur.empty())
      out.push_back(Value(cur));
    return Value::generator(std::move(out));
  }
  fail("unknown filter '" + name + "'");
}

} // namespace tpc::server::jinja
