//===- Value.cpp - Python semantics of template values ---------------------===//
#include "server/jinja/Value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tpc::server::jinja {

const Value *Dict::find(const Value &key) const {
  for (const auto &[k, v] : items)
    if (k == key)
      return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto &[k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::function(Function f, std::string name) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(std::move(f));
  v.name_ = std::move(name);
  return v;
}

Value Value::ns(Dict d) {
  Value v(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::undefined(std::string what) {
  Value v;
  v.name_ = std::move(what);
  return v;
}

namespace {
template <typename J> Value fromJsonImpl(const J &j) {
  using Value = jinja::Value;
  switch (j.type()) {
  case nlohmann::json::value_t::null:
    return Value::none();
  case nlohmann::json::value_t::boolean:
    return Value(j.template get<bool>());
  case nlohmann::json::value_t::number_integer:
    return Value(j.template get<int64_t>());
  case nlohmann::json::value_t::number_unsigned:
    return Value(static_cast<int64_t>(j.template get<uint64_t>()));
  case nlohmann::json::value_t::number_float:
    return Value(j.template get<double>());
  case nlohmann::json::value_t::string:
    return Value(j.template get<std::string>());
  case nlohmann::json::value_t::array: {
    List l;
    for (const auto &e : j)
      l.push_back(fromJsonImpl(e));
    return Value(std::move(l));
  }
  case nlohmann::json::value_t::object: {
    Dict d;
    for (auto it = j.begin(); it != j.end(); ++it)
      d.items.emplace_back(Value(it.key()), fromJsonImpl(it.value()));
    return Value(std::move(d));
  }
  default:
    return Value::none();
  }
}
} // namespace

Value Value::fromJson(const nlohmann::ordered_json &j) { return fromJsonImpl(j); }
Value Value::fromJson(const nlohmann::json &j) { return fromJsonImpl(j); }

bool Value::truthy() const {
  switch (kind_) {
  case Kind::Undefined:
  case Kind::None:
    return false;
  case Kind::Bool:
  case Kind::Int:
    return int_ != 0;
  case Kind::Float:
    return float_ != 0;
  case Kind::String:
    return !str_->empty();
  case Kind::List:
    return generator_ || !list_->empty();
  case Kind::Dict:
    return !dict_->items.empty();
  default:
    return true;
  }
}

std::string pyFloat(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest digits that read back as d, as Python's repr picks them; then Python's layout: fixed
  // notation for exponents in [-4, 16), else scientific with a signed two-digit exponent.
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg)
    mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.')
      digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else {
      if (digits.size() <= static_cast<size_t>(exp) + 1)
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      else
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string pyRepr(const std::string &s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == q)
      out += std::string("\\") + static_cast<char>(q);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += static_cast<char>(c);
  }
  return out + q;
}

std::string Value::toString() const {
  switch (kind_) {
  case Kind::Undefined:
    return "";
  case Kind::None:
    return "None";
  case Kind::Bool:
    return int_ ? "True" : "False";
  case Kind::Int:
    return std::to_string(int_);
  case Kind::Float:
    return pyFloat(float_);
  case Kind::String:
    return *str_;
  case Kind::Function:
    return "<function " + name_ + ">";
  default:
    return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
  case Kind::String:
    return pyRepr(*str_);
  case Kind::List: {
    if (generator_)
      return "<generator object>";
    std::string out = tuple_ ? "(" : "[";
    for (size_t i = 0; i < list_->size(); ++i)
      out += (i ? ", " : "") + (*list_)[i].repr();
    if (tuple_)
      return out + (list_->size() == 1 ? ",)" : ")");
    return out + "]";
  }
  case Kind::Dict:
  case Kind::Namespace: {
    std::string out = kind_ == Kind::Namespace ? "<Namespace {" : "{";
    for (size_t i = 0; i < dict_->items.size(); ++i)
      out += (i ? ", " : "") + dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
    return out + (kind_ == Kind::Namespace ? "}>" : "}");
  }
  default:
    return toString();
  }
}

std::string Value::typeName() const {
  switch (kind_) {
  case Kind::Undefined:
    return "Undefined";
  case Kind::None:
    return "NoneType";
  case Kind::Bool:
    return "bool";
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::String:
    return "str";
  case Kind::List:
    return generator_ ? "generator" : tuple_ ? "tuple" : "list";
  case Kind::Dict:
    return "dict";
  case Kind::Function:
    return "function";
  case Kind::Namespace:
    return "Namespace";
  }
  return "?";
}

bool Value::operator==(const Value &o) const {
  if (isNumber() && o.isNumber()) {
    if (kind_ == Kind::Float || o.kind_ == Kind::Float)
      return asFloat() == o.asFloat();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_)
    return false;
  switch (kind_) {
  case Kind::Undefined:
  case Kind::None:
    return true;
  case Kind::String:
    return *str_ == *o.str_;
  case Kind::List:
    return *list_ == *o.list_;
  case Kind::Dict:
  case Kind::Namespace: {
    if (dict_->items.size() != o.dict_->items.size())
      return false;
    for (const auto &[k, v] : dict_->items) {
      const Value *ov = o.dict_->find(k);
      if (!ov || *ov != v)
        return false;
    }
    return true;
  }
  default:
    return fn_ == o.fn_;
  }
}

bool Value::less(const Value &o) const {
  if (isNumber() && o.isNumber())
    return asFloat() < o.asFloat();
  if (isString() && o.isString())
    return *str_ < *o.str_;
  if (isList() && o.isList())
    return std::lexicographical_compare(list_->begin(), list_->end(), o.list_->begin(), o.list_->end(),
                                        [](const Value &a, const Value &b) { return a.less(b); });
  throw RenderError{"'<' not supported between instances of '" + typeName() + "' and '" + o.typeName() + "'"};
}

List Value::iterate() const {
  switch (kind_) {
  case Kind::Undefined:
    return {};
  case Kind::List:
    return *list_;
  case Kind::Dict: {
    List keys;
    for (const auto &kv : dict_->items)
      keys.push_back(kv.first);
    return keys;
  }
  case Kind::String: {
    // Python iterates code points: keep each UTF-8 sequence whole.
    List chars;
    const std::string &s = *str_;
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = s[i];
      const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      chars.push_back(Value(s.substr(i, n)));
      i += n;
    }
    return chars;
  }
  default:
    throw RenderError{"'" + typeName() + "' object is not iterable"};
  }
}

namespace {
void jsonString(std::string &out, const std::string &s, bool ensureAscii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (ensureAscii && c >= 0x80) { // decode one UTF-8 sequence, write it as \uXXXX (a surrogate pair past U+FFFF)
      const size_t n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
      for (size_t k = 1; k < n && i + k < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      i += n - 1;
      char b[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
      continue;
    }
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        out += b;
      } else {
        out += static_cast<char>(c); // ensure_ascii=False: UTF-8 passes through
      }
    }
  }
  out += '"';
}
} // namespace

void Value::jsonInto(std::string &out, int indent, int depth, bool sortKeys, const std::string &itemSep,
                     const std::string &keySep, bool ensureAscii) const {
  auto newline = [&](int d) {
    if (indent >= 0)
      out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
  case Kind::None:
    out += "null";
    return;
  case Kind::Bool:
    out += int_ ? "true" : "false";
    return;
  case Kind::Int:
    out += std::to_string(int_);
    return;
  case Kind::Float:
    out += std::isnan(float_) ? "NaN" : std::isinf(float_) ? (float_ > 0 ? "Infinity" : "-Infinity") : pyFloat(float_);
    return;
  case Kind::String:
    jsonString(out, *str_, ensureAscii);
    return;
  case Kind::List: {
    if (generator_)
      throw RenderError{"Object of type generator is not JSON serializable"};
    if (list_->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < list_->size(); ++i) {
      if (i)
        out += itemSep;
      newline(depth + 1);
      (*list_)[i].jsonInto(out, indent, depth + 1, sortKeys, itemSep, keySep, ensureAscii);
    }
    newline(depth);
    out += ']';
    return;
  }
  case Kind::Dict:
  case Kind::Namespace: {
    if (dict_->items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value> *> items;
    for (const auto &kv : dict_->items)
      items.push_back(&kv);
    if (sortKeys)
      std::stable_sort(items.begin(), items.end(), [](auto *a, auto *b) { return a->first.less(b->first); });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i)
        out += itemSep;
      newline(depth + 1);
      const Value &k = items[i]->first;
      // json.dumps writes non-string keys as their JSON text in quotes (True -> "true").
      if (k.isString())
        jsonString(out, k.str(), ensureAscii);
      else if (k.isNone() || k.isBool() || k.isNumber()) {
        std::string t;
        k.jsonInto(t, -1, 0, false, itemSep, keySep, false);
        jsonString(out, t, false);
      } else
        throw RenderError{"keys must be str, int, float, bool or None, not " + k.typeName()};
      out += keySep;
      items[i]->second.jsonInto(out, indent, depth + 1, sortKeys, itemSep, keySep, ensureAscii);
    }
    newline(depth);
    out += '}';
    return;
  }
  default:
    throw RenderError{"Object of type " + typeName() + " is not JSON serializable"};
  }
}

std::string Value::toJson(int indent, bool sortKeys, const std::string &itemSep, const std::string &keySep,
                          bool ensureAscii) const {
  std::string out;
  jsonInto(out, indent, 0, sortKeys, itemSep, keySep, ensureAscii);
  return out;
}

std::string htmlEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&#34;"; break;
    case '\'': out += "&#39;"; break;
    default: out += c;
    }
  }
  return out;
}

Value Args::get(size_t i, const char *kw, Value fallback) const {
  if (i < positional.size())
    return positional[i];
  for (const auto &[k, v] : keyword)
    if (k == kw)
      return v;
  return fallback;
}

} // namespace tpc::server::jinja
