//===- Builtins.cpp - filters, tests, methods and globals ------------------===//
//
// jinja2's builtin filters and tests, the Python str/dict/list methods chat templates call, and the
// globals transformers adds. Methods that would change a list or dict in place (append, pop, update...)
// are refused as ImmutableSandboxedEnvironment refuses them; namespace() attributes are the one mutable
// state. Case mapping (upper, lower, title, capitalize) covers ASCII letters only.
//===----------------------------------------------------------------------===//
#include "server/jinja/Interp.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace tpc::server::jinja {

namespace {
[[noreturn]] void fail(const std::string &msg) { throw RenderError{msg}; }

const char *const kSpace = " \t\n\r\v\f";

std::string mapCase(std::string s, int (*f)(int)) {
  for (char &c : s)
    c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string title(const std::string &s) {
  std::string out = s;
  bool prevLetter = false;
  for (char &c : out) {
    const bool letter = isalpha(static_cast<unsigned char>(c));
    c = static_cast<char>(letter && !prevLetter ? toupper(static_cast<unsigned char>(c))
                                                : tolower(static_cast<unsigned char>(c)));
    prevLetter = letter;
  }
  return out;
}

std::string capitalize(const std::string &s) {
  std::string out = mapCase(s, tolower);
  if (!out.empty())
    out[0] = static_cast<char>(toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string needStr(const Value &v, const std::string &what) {
  if (!v.isString())
    fail(what + " expects a string, not " + v.typeName());
  return v.str();
}

List split(const std::string &s, const Value &sepV, int64_t maxsplit) {
  List out;
  if (sepV.isNone() || sepV.isUndefined()) { // whitespace runs, no empty parts
    size_t i = 0;
    while (true) {
      i = s.find_first_not_of(kSpace, i);
      if (i == std::string::npos)
        break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Value(pyStrip(s.substr(i), "", false, true)));
        break;
      }
      const size_t e = s.find_first_of(kSpace, i);
      out.push_back(Value(s.substr(i, e == std::string::npos ? std::string::npos : e - i)));
      if (e == std::string::npos)
        break;
      i = e;
    }
    return out;
  }
  const std::string sep = needStr(sepV, "split()'s separator");
  if (sep.empty())
    fail("split(): empty separator");
  size_t i = 0;
  while (true) {
    const size_t e = s.find(sep, i);
    if (e == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value(s.substr(i)));
      break;
    }
    out.push_back(Value(s.substr(i, e - i)));
    i = e + sep.size();
  }
  return out;
}

std::string replace(const std::string &s, const std::string &from, const std::string &to, int64_t count,
                    size_t limit) {
  std::string out;
  size_t i = 0;
  int64_t done = 0;
  if (from.empty()) { // Python inserts `to` between every character
    for (const Value &c : Value(s).iterate()) {
      if (count < 0 || done++ < count)
        out += to;
      out += c.str();
    }
    if (count < 0 || done < count)
      out += to;
    return out;
  }
  while (true) {
    const size_t e = s.find(from, i);
    if (e == std::string::npos || (count >= 0 && done == count))
      break;
    out += s.substr(i, e - i) + to;
    if (out.size() > limit)
      fail("replace() passed " + std::to_string(limit) + " bytes (a sandbox limit)");
    i = e + from.size();
    ++done;
  }
  return out + s.substr(i);
}

/// str.format: {} {0} {name}, with {{ and }} as braces; no format specs beyond what str() prints.
std::string format(const std::string &f, const Args &a) {
  std::string out;
  size_t auto_ = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (f[i] == '{') {
      const size_t e = f.find('}', i);
      if (e == std::string::npos)
        fail("format(): unmatched '{'");
      const std::string field = f.substr(i + 1, e - i - 1);
      Value v;
      if (field.empty())
        v = a.get(auto_++, "");
      else if (isdigit(static_cast<unsigned char>(field[0])) && field.size() < 9)
        v = a.get(std::stoul(field), "");
      else
        v = a.get(static_cast<size_t>(-1), field.c_str());
      if (v.isUndefined())
        fail("format(): no value for '{" + field + "}'");
      out += v.toString();
      i = e;
    } else {
      out += f[i];
    }
  }
  return out;
}

Value pyStrftime(const std::string &fmt) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm); // transformers: datetime.now().strftime(fmt)
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value(std::string(buf, n));
}

int64_t toInt(const Value &v, int64_t dflt) {
  if (v.isNumber())
    return v.asInt();
  if (v.isString()) {
    try {
      size_t used = 0;
      const std::string s = pyStrip(v.str(), "", true, true);
      const int64_t r = std::stoll(s, &used);
      if (used == s.size())
        return r;
      const double d = std::stod(s, &used); // jinja2's int filter also reads "3.5" as 3
      if (used == s.size())
        return static_cast<int64_t>(d);
    } catch (...) {
    }
  }
  return dflt;
}
} // namespace

std::string pyStrip(const std::string &s, const std::string &chars, bool left, bool right) {
  const char *set = chars.empty() ? kSpace : chars.c_str();
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strchr(set, s[b]) && s[b])
      ++b;
  if (right)
    while (e > b && strchr(set, s[e - 1]) && s[e - 1])
      --e;
  return s.substr(b, e - b);
}

Value Interp::attr(const Value &obj, const std::string &name) {
  auto method = [&](Function f) { return Value::function(std::move(f), name); };
  if (obj.isNamespace()) {
    const Value *v = obj.dict().find(Value(name));
    return v ? *v : Value::undefined(name);
  }
  if (obj.isDict()) {
    const Dict &d = obj.dict();
    if (name == "items" || name == "keys" || name == "values")
      return method([obj, name](Args &) {
        List out;
        for (const auto &[k, v] : obj.dict().items)
          out.push_back(name == "keys" ? k : name == "values" ? v : Value::tuple(List{k, v}));
        return Value(std::move(out));
      });
    if (name == "get")
      return method([obj](Args &a) {
        const Value *v = obj.dict().find(a.get(0, "key"));
        return v ? *v : a.get(1, "default", Value::none());
      });
    if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem")
      fail("access to attribute '" + name + "' of 'dict' object is unsafe (the sandbox keeps dicts immutable)");
    const Value *v = d.find(Value(name));
    return v ? *v : Value::undefined(name);
  }
  if (obj.isString()) {
    const std::string s = obj.str();
    const size_t limit = limits_.maxOutput;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return method([s, name](Args &a) {
        const Value c = a.get(0, "chars", Value::none());
        return Value(pyStrip(s, c.isString() ? c.str() : "", name != "rstrip", name != "lstrip"));
      });
    if (name == "upper" || name == "lower")
      return method([s, name](Args &) { return Value(mapCase(s, name == "upper" ? toupper : tolower)); });
    if (name == "title")
      return method([s](Args &) { return Value(title(s)); });
    if (name == "capitalize")
      return method([s](Args &) { return Value(capitalize(s)); });
    if (name == "startswith" || name == "endswith")
      return method([s, name](Args &a) {
        const Value p = a.get(0, "prefix");
        List options = p.isList() ? p.list() : List{p};
        for (const Value &o : options) {
          const std::string x = needStr(o, name + "()");
          if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                   : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
            return Value(true);
        }
        return Value(false);
      });
    if (name == "split" || name == "rsplit")
      return method([s, name](Args &a) {
        const int64_t maxsplit = a.get(1, "maxsplit", Value(-1)).asInt();
        if (name == "rsplit" && maxsplit >= 0) { // split from the right: reverse, split, reverse
          const Value sep = a.get(0, "sep", Value::none());
          if (!sep.isString())
            fail("rsplit() with a limit needs a separator here");
          std::string rs(s.rbegin(), s.rend()), rsep(sep.str().rbegin(), sep.str().rend());
          List parts = split(rs, Value(rsep), maxsplit);
          std::reverse(parts.begin(), parts.end());
          for (Value &p : parts)
            p = Value(std::string(p.str().rbegin(), p.str().rend()));
          return Value(std::move(parts));
        }
        return Value(split(s, a.get(0, "sep", Value::none()), maxsplit));
      });
    if (name == "splitlines")
      return method([s](Args &) {
        List out;
        size_t i = 0;
        while (i < s.size()) {
          size_t e = s.find_first_of("\r\n", i);
          if (e == std::string::npos) {
            out.push_back(Value(s.substr(i)));
            break;
          }
          out.push_back(Value(s.substr(i, e - i)));
          i = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
        }
        return Value(std::move(out));
      });
    if (name == "replace")
      return method([s, limit](Args &a) {
        return Value(replace(s, needStr(a.get(0, "old"), "replace()"), needStr(a.get(1, "new"), "replace()"),
                             a.get(2, "count", Value(-1)).asInt(), limit));
      });
    if (name == "format")
      return method([s](Args &a) { return Value(format(s, a)); });
    if (name == "join")
      return method([s](Args &a) {
        std::string out;
        const List items = a.get(0, "iterable").iterate();
        for (size_t i = 0; i < items.size(); ++i)
          out += (i ? s : "") + needStr(items[i], "join()");
        return Value(out);
      });
    if (name == "find" || name == "rfind" || name == "index" || name == "count")
      return method([s, name](Args &a) {
        const std::string x = needStr(a.get(0, "sub"), name + "()");
        if (name == "count") {
          if (x.empty())
            return Value(Value(s).iterate().size() + 1);
          int64_t n = 0;
          for (size_t i = s.find(x); i != std::string::npos; i = s.find(x, i + x.size()))
            ++n;
          return Value(n);
        }
        const size_t p = name == "rfind" ? s.rfind(x) : s.find(x);
        if (p == std::string::npos && name == "index")
          fail("index(): substring not found");
        return p == std::string::npos ? Value(-1) : Value(p);
      });
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" ||
        name == "islower")
      return method([s, name](Args &) {
        if (s.empty())
          return Value(false);
        bool cased = false;
        for (unsigned char c : s) {
          bool ok = name == "isdigit"   ? isdigit(c)
                    : name == "isalpha" ? isalpha(c)
                    : name == "isspace" ? isspace(c)
                    : name == "isalnum" ? isalnum(c)
                    : name == "isupper" ? !islower(c)
                                        : !isupper(c);
          cased |= isalpha(c);
          if (!ok)
            return Value(false);
        }
        return Value(name == "isupper" || name == "islower" ? cased : true);
      });
    return Value::undefined(name);
  }
  if (obj.isList()) {
    if (name == "index" || name == "count")
      return method([obj, name](Args &a) {
        const Value x = a.get(0, "value");
        int64_t n = 0;
        for (size_t i = 0; i < obj.list().size(); ++i)
          if (obj.list()[i] == x) {
            if (name == "index")
              return Value(i);
            ++n;
          }
        if (name == "index")
          fail("index(): value is not in list");
        return Value(n);
      });
    if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse")
      fail("access to attribute '" + name + "' of 'list' object is unsafe (the sandbox keeps lists immutable)");
  }
  return Value::undefined(name);
}

Value Interp::item(const Value &obj, const Value &key) {
  if (obj.isDict()) {
    const Value *v = obj.dict().find(key);
    if (v)
      return *v;
    return key.isString() ? attr(obj, key.str()) : Value::undefined(key.toString());
  }
  if ((obj.isList() || obj.isString()) && key.isNumber()) {
    const List seq = obj.isList() ? obj.list() : obj.iterate();
    int64_t i = key.asInt();
    if (i < 0)
      i += static_cast<int64_t>(seq.size());
    if (i < 0 || i >= static_cast<int64_t>(seq.size()))
      return Value::undefined("index " + key.toString());
    return seq[static_cast<size_t>(i)];
  }
  if (key.isString())
    return attr(obj, key.str());
  return Value::undefined(key.toString());
}

Value Interp::call(const Value &fn, Args &args) {
  if (!fn.isCallable())
    fail("'" + (args.callee.empty() ? fn.typeName() : args.callee) + "' is not callable (a " + fn.typeName() + ")");
  if (++depth_ > limits_.maxDepth)
    fail("calls nested deeper than " + std::to_string(limits_.maxDepth) + " (a sandbox limit)");
  Value r = fn.fn()(args);
  --depth_;
  return r;
}

void addBuiltinGlobals(Scope &scope) {
  auto add = [&](const char *name, Function f) { scope.vars[name] = Value::function(std::move(f), name); };
  add("range", [](Args &a) {
    int64_t start = 0, stop, step = 1;
    if (a.size() == 1) {
      stop = a.positional[0].asInt();
    } else if (a.size() >= 2) {
      start = a.positional[0].asInt();
      stop = a.positional[1].asInt();
      if (a.size() > 2)
        step = a.positional[2].asInt();
    } else {
      fail("range() needs 1 to 3 arguments");
    }
    if (step == 0)
      fail("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000)
        fail("range() over 100000 items (a sandbox limit)");
      out.push_back(Value(i));
    }
    return Value(std::move(out));
  });
  add("namespace", [](Args &a) {
    Dict d;
    if (!a.positional.empty() && a.positional[0].isDict())
      d = a.positional[0].dict();
    for (const auto &[k, v] : a.keyword)
      d.set(Value(k), v);
    return Value::ns(std::move(d));
  });
  add("dict", [](Args &a) {
    Dict d;
    if (!a.positional.empty() && a.positional[0].isDict())
      d = a.positional[0].dict();
    for (const auto &[k, v] : a.keyword)
      d.set(Value(k), v);
    return Value(std::move(d));
  });
  add("raise_exception", [](Args &a) -> Value {
    fail("the template raised an exception: " + a.get(0, "message").toString());
  });
  add("strftime_now", [](Args &a) { return pyStrftime(needStr(a.get(0, "format"), "strftime_now()")); });
}

} // namespace tpc::server::jinja
