//===- JsonSchema.cpp - JSON schema -> GBNF ---------------------------------===//
//
// One visit per schema node returns a GBNF expression (usually the name of a rule it added); shared
// primitives (ws, string, number, ...) are added once per prefix. Errors are thrown inside as SchemaError
// with the JSON path and returned as an Error. Learned from llama.cpp's json-schema-to-grammar.cpp (the
// primitives' shape, optional properties as a chain of tails, keys that avoid the declared names through a
// trie), written anew.
//===----------------------------------------------------------------------===//
#include "server/grammar/JsonSchema.h"

#include "runtime/tokenizer/Tokenizer.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

namespace tpc::server::grammar {

using json = nlohmann::json;

std::string gbnfLiteral(const std::string &text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20)
      out += fmt::format("\\x{:02X}", c);
    else
      out += ch;
  }
  return out + "\"";
}

namespace {

struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Keywords that only annotate: ignored by design.
const std::set<std::string> kAnnotations = {"title",    "description", "$schema",         "$id",
                                            "$comment", "default",     "examples",        "deprecated",
                                            "readOnly", "writeOnly",   "contentEncoding", "contentMediaType",
                                            "$defs",    "definitions"};
/// Validation keywords this converter does not implement: an error, never dropped.
const std::set<std::string> kUnsupported = {"pattern",
                                            "format",
                                            "multipleOf",
                                            "allOf",
                                            "not",
                                            "if",
                                            "then",
                                            "else",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "dependencies",
                                            "patternProperties",
                                            "propertyNames",
                                            "minProperties",
                                            "maxProperties",
                                            "uniqueItems",
                                            "contains",
                                            "minContains",
                                            "maxContains",
                                            "unevaluatedProperties",
                                            "unevaluatedItems",
                                            "additionalItems",
                                            "$anchor",
                                            "$dynamicRef",
                                            "$dynamicAnchor",
                                            "$recursiveRef",
                                            "$recursiveAnchor",
                                            "contentSchema"};

constexpr int64_t kMaxCount = 2000;           // the GBNF parser's repetition bound
constexpr int kMaxDepth = 64;                 // schema nesting (the converter recurses per level)
constexpr size_t kMaxKeyLength = 256;         // declared names avoided by additional keys (a trie, recursed)
constexpr int64_t kMaxInt = 9999999999999999; // 16 digits, as the integer rule allows

/// Digits of the integers in [lo, hi], both written with the same number of digits: the shared leading
/// digit, or the low edge, the middle digits free and the high edge.
std::string sameLength(const std::string &lo, const std::string &hi) {
  if (lo.empty())
    return "";
  const size_t rest = lo.size() - 1;
  auto lit = [](char c) { return std::string("\"") + c + "\""; };
  auto free = [&](size_t n) { return n == 0 ? std::string() : fmt::format(" [0-9]{{{}}}", n); };
  if (lo == hi)
    return gbnfLiteral(lo);
  if (lo[0] == hi[0])
    return lit(lo[0]) + " " + sameLength(lo.substr(1), hi.substr(1));
  if (lo.substr(1) == std::string(rest, '0') && hi.substr(1) == std::string(rest, '9'))
    return fmt::format("[{}-{}]", lo[0], hi[0]) + free(rest);
  std::vector<std::string> alts;
  alts.push_back(lit(lo[0]) + " " + sameLength(lo.substr(1), std::string(rest, '9')));
  if (lo[0] + 1 <= hi[0] - 1)
    alts.push_back(fmt::format("[{}-{}]", char(lo[0] + 1), char(hi[0] - 1)) + free(rest));
  alts.push_back(lit(hi[0]) + " " + sameLength(std::string(rest, '0'), hi.substr(1)));
  std::string out;
  for (const std::string &a : alts)
    out += (out.empty() ? "( " : " | ") + a;
  return out + " )";
}

/// The integers in [lo, hi] (0 <= lo <= hi <= kMaxInt) as alternatives by digit count.
std::vector<std::string> nonNegative(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  int64_t low = 0, high = 9; // the numbers of n digits
  for (int n = 1; n <= 16; ++n, low = high + 1, high = high * 10 + 9) {
    const int64_t a = std::max(lo, low), b = std::min(hi, high);
    if (a <= b)
      alts.push_back(sameLength(std::to_string(a), std::to_string(b)));
  }
  return alts;
}

/// A class of the given code points as GBNF (every point as a hex escape, so nothing needs quoting).
std::string hexPoint(uint32_t c) {
  return c <= 0xFFFF ? fmt::format("\\u{:04X}", c) : fmt::format("\\U{:08X}", c);
}

class Converter {
public:
  Converter(const json &root, std::string prefix) : root_(root), p_(std::move(prefix)) {}

  std::string run() {
    const std::string body = visit(root_, "#", "");
    rules_.insert(rules_.begin(), {p_, body});
    std::string out;
    for (const auto &[name, rule] : rules_)
      out += name + " ::= " + rule + "\n";
    return out;
  }

  std::string object() { return prim("object"); }

private:
  const json &root_;
  std::string p_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;

  [[noreturn]] static void fail(const std::string &path, const std::string &what) {
    throw SchemaError(fmt::format("{} at {}", what, path));
  }

  std::string newName(const std::string &hint) {
    std::string base = p_;
    std::string h;
    for (char c : hint)
      h += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (!h.empty())
      base += "-" + h.substr(0, 40);
    std::string name = base;
    for (int i = 2; names_.count(name) || name == p_; ++i)
      name = base + "-" + std::to_string(i);
    names_.insert(name);
    return name;
  }

  std::string add(const std::string &hint, const std::string &body) {
    const std::string name = newName(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  /// A shared primitive rule, added on first use.
  std::string prim(const std::string &kind) {
    const std::string name = p_ + "-" + kind;
    if (names_.count(name))
      return name;
    names_.insert(name);
    rules_.emplace_back(name, ""); // reserve the name before the body refers to others
    const size_t at = rules_.size() - 1;
    std::string body;
    if (kind == "ws") // one space, or a newline and an indentation: never a run a model can loop in
      body = "( \" \" | \"\\n\" [ \\t]{0,20} )?";
    else if (kind == "char")
      body = "[^\"\\\\\\x00-\\x1F] | " + prim("escape");
    else if (kind == "escape")
      body = "\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )";
    else if (kind == "string")
      body = "\"\\\"\" " + prim("char") + "* \"\\\"\"";
    else if (kind == "integer")
      body = "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )";
    else if (kind == "number")
      body = "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,5} )?";
    else if (kind == "boolean")
      body = "\"true\" | \"false\"";
    else if (kind == "null")
      body = "\"null\"";
    else if (kind == "value")
      body = prim("object") + " | " + prim("array") + " | " + prim("string") + " | " + prim("number") +
             " | " + prim("boolean") + " | " + prim("null");
    else if (kind == "object") {
      const std::string ws = prim("ws"),
                        kv = prim("string") + " " + ws + " \":\" " + ws + " " + prim("value") + " " + ws;
      body = "\"{\" " + ws + " ( " + kv + " ( \",\" " + ws + " " + kv + " )* )? \"}\"";
    } else if (kind == "array") {
      const std::string ws = prim("ws"), item = prim("value") + " " + ws;
      body = "\"[\" " + ws + " ( " + item + " ( \",\" " + ws + " " + item + " )* )? \"]\"";
    }
    rules_[at].second = body;
    return name;
  }

  std::string alternatives(const std::vector<std::string> &alts, const std::string &hint) {
    if (alts.size() == 1)
      return alts[0];
    std::string body;
    for (const std::string &a : alts)
      body += (body.empty() ? "" : " | ") + a;
    return add(hint, body);
  }

  int64_t count(const json &s, const char *key, const std::string &path) {
    const json &v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<int64_t>() > kMaxCount)
      fail(path + "/" + key, fmt::format("'{}' above {} is not supported", key, kMaxCount));
    return v.get<int64_t>();
  }

  /// "{m,n}" / "{m,}" repetition suffix.
  static std::string times(int64_t lo, int64_t hi) {
    return hi < 0 ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
  }

  std::string visit(const json &s, const std::string &path, const std::string &hint) {
    // The converter recurses per nesting level (and $ref): bounded, so a hostile schema cannot overflow.
    struct Depth {
      int &d;
      explicit Depth(int &d) : d(d) { ++d; }
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth)
      fail(path, fmt::format("the schema nests deeper than {} levels", kMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>())
        fail(path, "the schema 'false' matches nothing");
      return prim("value");
    }
    if (!s.is_object())
      fail(path, "a schema must be an object or a boolean");
    bool validation = false; // any keyword that constrains, besides $ref
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kUnsupported.count(it.key()))
        fail(path, fmt::format("'{}' is not supported", it.key()));
      if (!kAnnotations.count(it.key()) && it.key() != "$ref")
        validation = true;
    }
    if (s.contains("$ref")) {
      if (validation)
        fail(path, "keywords beside '$ref' are not supported (move them into the referenced schema)");
      return ref(s["$ref"], path);
    }
    if (s.contains("const"))
      return gbnfLiteral(s["const"].dump());
    if (s.contains("enum")) {
      const json &e = s["enum"];
      if (!e.is_array() || e.empty())
        fail(path + "/enum", "'enum' must be a non-empty array");
      std::vector<std::string> alts;
      for (const json &v : e)
        alts.push_back(gbnfLiteral(v.dump()));
      return alternatives(alts, hint + "-enum");
    }
    for (const char *key : {"anyOf", "oneOf"})
      if (s.contains(key)) {
        const json &a = s[key];
        if (!a.is_array() || a.empty())
          fail(path + "/" + key, fmt::format("'{}' must be a non-empty array of schemas", key));
        for (auto it = s.begin(); it != s.end(); ++it)
          if (it.key() != key && !kAnnotations.count(it.key()))
            fail(path,
                 fmt::format("'{}' beside '{}' is not supported (put it inside each branch)", it.key(), key));
        std::vector<std::string> alts;
        for (size_t i = 0; i < a.size(); ++i)
          alts.push_back(visit(a[i], fmt::format("{}/{}/{}", path, key, i), hint));
        return alternatives(alts, hint + "-alt");
      }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json &t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty() &&
               std::all_of(t.begin(), t.end(), [](const json &x) { return x.is_string(); }))
        for (const json &x : t)
          types.push_back(x.get<std::string>());
      else
        fail(path + "/type", "'type' must be a string or a non-empty array of strings");
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      fail(path, "bounds without \"type\": \"integer\" are not supported");
    } else {
      return prim("value");
    }
    std::vector<std::string> alts;
    for (const std::string &t : types)
      alts.push_back(typed(t, s, path, hint));
    return alternatives(alts, hint + "-types");
  }

  std::string typed(const std::string &t, const json &s, const std::string &path, const std::string &hint) {
    if (t == "string") {
      if (!s.contains("minLength") && !s.contains("maxLength"))
        return prim("string");
      const int64_t lo = s.contains("minLength") ? count(s, "minLength", path) : 0;
      const int64_t hi = s.contains("maxLength") ? count(s, "maxLength", path) : -1;
      if (hi >= 0 && hi < lo)
        fail(path, "'maxLength' is below 'minLength'");
      return add(hint + "-string", "\"\\\"\" " + prim("char") + times(lo, hi) + " \"\\\"\"");
    }
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                         s.contains("exclusiveMaximum");
    if (t == "integer" && bounded)
      return integerRange(s, path, hint);
    if (t == "number" && bounded)
      for (const char *key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(key))
          fail(path, fmt::format("'{}' on a number is not supported (on an integer it is)", key));
    if (t == "integer" || t == "number" || t == "boolean" || t == "null")
      return prim(t);
    if (t == "object")
      return objectRule(s, path, hint);
    if (t == "array")
      return arrayRule(s, path, hint);
    fail(path + "/type",
         fmt::format("unknown type '{}' (string, number, integer, boolean, null, object, array)", t));
  }

  /// An integer within minimum / maximum / exclusiveMinimum / exclusiveMaximum, digit by digit.
  std::string integerRange(const json &s, const std::string &path, const std::string &hint) {
    double lo = -1e300, hi = 1e300;
    for (const char *key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(key))
        continue;
      if (!s[key].is_number())
        fail(path + "/" + key, fmt::format("'{}' must be a number", key));
      const double v = s[key].get<double>();
      const std::string k = key;
      if (k == "minimum")
        lo = std::max(lo, std::ceil(v));
      else if (k == "exclusiveMinimum")
        lo = std::max(lo, std::floor(v) + 1);
      else if (k == "maximum")
        hi = std::min(hi, std::floor(v));
      else
        hi = std::min(hi, std::ceil(v) - 1);
    }
    if (lo > hi)
      fail(path, "the bounds leave no integer");
    if (lo > double(kMaxInt) || hi < -double(kMaxInt))
      fail(path, "integer bounds beyond 16 digits are not supported");
    // Past 16 digits a bound is no bound: the integer rule never writes more digits.
    const bool below = lo<-double(kMaxInt), above = hi> double(kMaxInt);
    const int64_t a = below ? -kMaxInt : static_cast<int64_t>(lo),
                  b = above ? kMaxInt : static_cast<int64_t>(hi);
    std::vector<std::string> alts;
    if (a < 0) { // -k for k in [max(1, -b), -a]
      std::string neg;
      for (const std::string &x : nonNegative(std::max<int64_t>(1, b < 0 ? -b : 1), -a))
        neg += (neg.empty() ? "" : " | ") + x;
      alts.push_back("\"-\" ( " + neg + " )");
    }
    if (b >= 0)
      for (const std::string &x : nonNegative(std::max<int64_t>(0, a), b))
        alts.push_back(x);
    std::string body;
    for (const std::string &x : alts)
      body += (body.empty() ? "" : " | ") + x;
    return add(hint + "-int", body);
  }

  std::string ref(const json &r, const std::string &path) {
    if (!r.is_string())
      fail(path + "/$ref", "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end())
      return it->second;
    if (target.empty() || target[0] != '#')
      fail(path + "/$ref",
           fmt::format("'$ref' {} is not local (only #/$defs/..., #/definitions/... and #)", target));
    const json *node = &root_;
    if (target.size() > 1) {
      json::json_pointer ptr;
      try {
        ptr = json::json_pointer(target.substr(1));
      } catch (const json::exception &) {
        fail(path + "/$ref", fmt::format("'$ref' {} is not a JSON pointer", target));
      }
      if (!root_.contains(ptr))
        fail(path + "/$ref", fmt::format("'$ref' {} points at nothing in the schema", target));
      node = &root_.at(ptr);
    }
    std::string hint = target.substr(target.rfind('/') + 1);
    const std::string name = newName(hint.empty() || hint == "#" ? "self" : hint);
    refs_[target] = name;
    rules_.emplace_back(name, "");
    const size_t at = rules_.size() - 1;
    const std::string body = visit(*node, target, hint);
    rules_[at].second = body;
    return name;
  }

  std::string objectRule(const json &s, const std::string &path, const std::string &hint) {
    const std::string ws = prim("ws");
    json props = json::object();
    if (s.contains("properties")) {
      props = s["properties"];
      if (!props.is_object())
        fail(path + "/properties", "'properties' must be an object");
    }
    std::vector<std::string> required;
    if (s.contains("required")) {
      const json &r = s["required"];
      if (!r.is_array() || !std::all_of(r.begin(), r.end(), [](const json &x) { return x.is_string(); }))
        fail(path + "/required", "'required' must be an array of strings");
      for (const json &x : r)
        if (std::find(required.begin(), required.end(), x.get<std::string>()) == required.end())
          required.push_back(x.get<std::string>());
    }
    std::string additional; // "" none; else the value expression of extra keys
    if (s.contains("additionalProperties")) {
      const json &a = s["additionalProperties"];
      if (a.is_boolean())
        additional = a.get<bool>() ? prim("value") : "";
      else if (a.is_object())
        additional = visit(a, path + "/additionalProperties", hint + "-additional");
      else
        fail(path + "/additionalProperties", "'additionalProperties' must be a boolean or a schema");
    } else if (props.empty() && required.empty()) {
      return prim("object"); // {"type": "object"}: any object
    }
    auto kv = [&](const std::string &key) {
      const json sub = props.contains(key) ? props[key] : json(true);
      const std::string value = visit(sub, path + "/properties/" + key, hint + "-" + key);
      return add(hint + "-" + key + "-kv",
                 gbnfLiteral(json(key).dump()) + " " + ws + " \":\" " + ws + " " + value + " " + ws);
    };
    std::vector<std::string> req, opt;
    for (const std::string &k : required)
      req.push_back(kv(k));
    for (auto it = props.begin(); it != props.end(); ++it)
      if (std::find(required.begin(), required.end(), it.key()) == required.end())
        opt.push_back(kv(it.key()));
    std::string extra; // the rule of one additional key/value
    if (!additional.empty()) {
      std::vector<std::string> declared;
      for (auto it = props.begin(); it != props.end(); ++it)
        declared.push_back(it.key());
      for (const std::string &k : required)
        declared.push_back(k);
      const std::string key = declared.empty() ? prim("string") : otherKey(declared, path, hint);
      extra = add(hint + "-extra-kv", key + " " + ws + " \":\" " + ws + " " + additional + " " + ws);
    }
    const std::string more = extra.empty() ? "" : " ( \",\" " + ws + " " + extra + " )*";
    std::string body;
    if (!req.empty()) {
      body = req[0];
      for (size_t i = 1; i < req.size(); ++i)
        body += " \",\" " + ws + " " + req[i];
      for (const std::string &o : opt)
        body += " ( \",\" " + ws + " " + o + " )?";
      body += more;
    } else {
      // No required key: the first key present has no comma before it. tail(k) ::= ("," O_k)? tail(k+1).
      std::vector<std::string> tails(opt.size() + 1);
      tails[opt.size()] = more.empty() ? "" : add(hint + "-tail", more.substr(1));
      for (size_t k = opt.size(); k-- > 1;)
        tails[k] = add(hint + "-tail", "( \",\" " + ws + " " + opt[k] + " )? " + tails[k + 1]);
      std::string first;
      for (size_t k = 0; k < opt.size(); ++k)
        first += opt[k] + " " + tails[k + 1] + " | ";
      if (!extra.empty())
        first += extra + " " + tails[opt.size()] + " | ";
      body = "( " + first + "\"\" )";
    }
    return add(hint.empty() ? "object" : hint, "\"{\" " + ws + " " + body + " \"}\"");
  }

  /// A quoted key that is none of `words` (a trie of them: follow a word, leave it, or stop where no word
  /// ends).
  std::string otherKey(const std::vector<std::string> &words, const std::string &path,
                       const std::string &hint) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool word = false;
    };
    std::vector<Node> trie(1);
    for (const std::string &w : words) {
      std::string enc = json(w).dump();
      enc = enc.substr(1, enc.size() - 2);
      if (enc.size() > kMaxKeyLength)
        fail(
            path + "/additionalProperties",
            fmt::format("property names longer than {} bytes beside 'additionalProperties' are not supported",
                        kMaxKeyLength));
      if (enc.find('\\') != std::string::npos)
        fail(path + "/additionalProperties",
             fmt::format("a property name needing a JSON escape ('{}') beside "
                         "'additionalProperties' is not supported",
                         w));
      size_t n = 0;
      for (uint32_t c : rt::unicode::decodeUtf8(enc)) {
        auto it = trie[n].next.find(c);
        if (it == trie[n].next.end()) {
          trie.push_back({});
          it = trie[n].next.emplace(c, trie.size() - 1).first;
        }
        n = it->second;
      }
      trie[n].word = true;
    }
    const std::string rest = prim("char") + "*";
    std::function<std::string(size_t)> rule = [&](size_t n) -> std::string {
      std::string leave = "[^\"\\\\\\x00-\\x1F";
      std::string body;
      for (const auto &[c, child] : trie[n].next) {
        leave += hexPoint(c);
        std::string lit;
        rt::unicode::appendUtf8(lit, c);
        body += gbnfLiteral(lit) + " " + rule(child) + " | ";
      }
      body += leave + "] " + rest + " | " + prim("escape") + " " + rest;
      if (!trie[n].word)
        body += " | \"\"";
      return add(hint + "-key", body);
    };
    return "\"\\\"\" " + rule(0) + " \"\\\"\"";
  }

  std::string arrayRule(const json &s, const std::string &path, const std::string &hint) {
    const std::string ws = prim("ws");
    const int64_t lo = s.contains("minItems") ? count(s, "minItems", path) : 0;
    const int64_t hi = s.contains("maxItems") ? count(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo)
      fail(path, "'maxItems' is below 'minItems'");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const json &p = s["prefixItems"];
      if (!p.is_array())
        fail(path + "/prefixItems", "'prefixItems' must be an array of schemas");
      for (size_t i = 0; i < p.size() && (hi < 0 || static_cast<int64_t>(i) < hi); ++i)
        prefix.push_back(
            visit(p[i], fmt::format("{}/prefixItems/{}", path, i), hint + "-" + std::to_string(i)));
    }
    std::string item; // the schema of the items after the prefix ("" none)
    if (s.contains("items")) {
      const json &it = s["items"];
      if (it.is_array())
        fail(path + "/items", "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
      if (!(it.is_boolean() && !it.get<bool>()))
        item = visit(it, path + "/items", hint + "-item");
    } else if (prefix.empty()) {
      item = prim("value");
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (item.empty() && k < lo)
      fail(path, "'minItems' asks for more items than 'prefixItems' gives and 'items' allows");
    std::string body;
    for (int64_t i = 0; i < k; ++i)
      body += (i ? " \",\" " + ws + " " : "") + prefix[static_cast<size_t>(i)] + " " + ws;
    if (!item.empty() && (hi < 0 || hi > k)) {
      const int64_t moreLo = std::max<int64_t>(0, lo - k), moreHi = hi < 0 ? -1 : hi - k;
      const std::string one = item + " " + ws;
      if (k > 0) {
        body += " ( \",\" " + ws + " " + one + " )" + times(moreLo, moreHi);
      } else if (moreLo > 0) {
        body = one + " ( \",\" " + ws + " " + one + " )" + times(moreLo - 1, moreHi < 0 ? -1 : moreHi - 1);
      } else if (moreHi != 0) {
        body =
            "( " + one + " ( \",\" " + ws + " " + one + " )" + times(0, moreHi < 0 ? -1 : moreHi - 1) + " )?";
      }
    }
    return add(hint.empty() ? "array" : hint + "-array", "\"[\" " + ws + " " + body + " \"]\"");
  }
};

bool validName(const std::string &s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

} // namespace

Expected<std::string> jsonSchemaToGbnf(const json &schema, const std::string &rulePrefix) {
  if (!validName(rulePrefix))
    return Error{fmt::format("rule prefix '{}' is not a GBNF name (letters, digits, '-', '_')", rulePrefix)};
  try {
    Converter c(schema, rulePrefix);
    return c.run();
  } catch (const SchemaError &e) {
    return Error{e.what()};
  }
}

std::string jsonObjectGbnf(const std::string &rulePrefix) {
  const json any = json::object(); // outlives the converter, which keeps a reference
  Converter c(any, rulePrefix);
  const std::string obj = c.object();
  std::string rules = c.run(); // root ::= any value; then point the root at the object rule
  return rulePrefix + " ::= " + obj + "\n" + rules.substr(rules.find('\n') + 1);
}

} // namespace tpc::server::grammar
