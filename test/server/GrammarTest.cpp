//===- GrammarTest.cpp - GBNF parser, matcher and JSON schema converter ----===//
//
// The parser on good and bad grammars (each error with its line and column), the automaton on strings
// (whole matches, live prefixes, UTF-8 split anywhere), the schema converter keyword by keyword (instances
// that must match and instances that must not, an error naming each unsupported keyword and its path),
// and the token-level matcher on a small vocabulary with byte tokens: the mask equals the per-token
// check, end-of-generation only where the grammar can end, special tokens never.
//===----------------------------------------------------------------------===//
#include "server/grammar/Gbnf.h"
#include "server/grammar/JsonSchema.h"
#include "server/grammar/Matcher.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace tpc;
using namespace tpc::server::grammar;
using json = nlohmann::json;

namespace {

std::shared_ptr<const Grammar> compile(const std::string &gbnf) {
  auto g = parseGbnf(gbnf);
  EXPECT_TRUE(g) << g.message() << "\n" << gbnf;
  return g ? *g : nullptr;
}

/// Whether `text` is a whole match (full) or a live prefix (!full) of the grammar.
bool matches(const std::shared_ptr<const Grammar> &g, const std::string &text, bool full = true) {
  Automaton a(g);
  const int32_t s = a.walk(a.start(), text);
  return s != Automaton::kDead && (!full || a.canEnd(s));
}

std::string parseError(const std::string &gbnf) {
  auto g = parseGbnf(gbnf);
  EXPECT_FALSE(g) << "accepted: " << gbnf;
  return g ? "" : g.message();
}

} // namespace

TEST(Gbnf, SyntaxAndMatching) {
  auto g = compile(R"(# a comment line
root  ::= "{" ws pair ("," ws pair)* "}"   # trailing comment
pair  ::= [a-z]+ ":" ws ( "true" | "false" )
ws    ::= [ \t\n]{0,3}
)");
  EXPECT_TRUE(matches(g, "{a:true}"));
  EXPECT_TRUE(matches(g, "{ab: false, c:\ttrue}"));
  EXPECT_FALSE(matches(g, "{a:true,}"));
  EXPECT_FALSE(matches(g, "{A:true}"));
  EXPECT_FALSE(matches(g, "{a:    true}")); // four spaces: past {0,3}
  EXPECT_TRUE(matches(g, "{ab: fal", false));
  EXPECT_FALSE(matches(g, "{ab: fal"));
  EXPECT_FALSE(matches(g, "{ab: fax", false));
}

TEST(Gbnf, RepetitionAndAlternation) {
  auto g = compile("root ::= \"a\"{2} \"b\"{1,3} \"c\"{2,} (\"x\" | \"yz\")? \"\"\n");
  EXPECT_TRUE(matches(g, "aabcc"));
  EXPECT_TRUE(matches(g, "aabbbcccyz"));
  EXPECT_TRUE(matches(g, "aabccx"));
  EXPECT_FALSE(matches(g, "abcc"));
  EXPECT_FALSE(matches(g, "aabbbbcc"));
  EXPECT_FALSE(matches(g, "aabc"));
  EXPECT_FALSE(matches(g, "aabccxyz"));
  // Rules spanning lines inside parentheses and after '|'.
  auto h = compile("root ::= (\n  \"a\"\n  \"b\" ) |\n  \"c\"\n");
  EXPECT_TRUE(matches(h, "ab"));
  EXPECT_TRUE(matches(h, "c"));
  EXPECT_FALSE(matches(h, "a"));
}

TEST(Gbnf, EscapesClassesAndUtf8) {
  auto g = compile(R"(root ::= "\x41\u00e9\n\"\\" [^"\\] [\u4e00-\u9fff]+ . [\[\]]
)");
  EXPECT_TRUE(matches(g, "A\xC3\xA9\n\"\\x\xE4\xB8\xAD\xE6\x96\x87\xF0\x9F\x98\x80]"));
  EXPECT_FALSE(matches(g, "A\xC3\xA9\n\"\\\"\xE4\xB8\xAD.]")); // [^"\\] refuses the quote
  EXPECT_FALSE(matches(g, "A\xC3\xA9\n\"\\xa.]"));             // 'a' is not in [\u4e00-\u9fff]
  // UTF-8 split anywhere: a partial character is alive only when some class can still take it.
  auto cjk = compile("root ::= [\\u4e00-\\u9fff]\n");
  EXPECT_TRUE(matches(cjk, "\xE4", false));
  EXPECT_TRUE(matches(cjk, "\xE4\xB8", false));
  EXPECT_FALSE(matches(cjk, "\xE4\xB8"));
  EXPECT_FALSE(matches(cjk, "\xC3", false)); // U+00C0..U+00FF: none in the class
  EXPECT_FALSE(matches(cjk, "\xB8", false)); // a continuation byte without a lead
  auto any = compile("root ::= [^a]\n");
  EXPECT_TRUE(matches(any, "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(any, "\xED\xA0\x80"));     // a UTF-16 surrogate is not a character
  EXPECT_FALSE(matches(any, "\xF4\x90\x80\x80")); // past U+10FFFF
  // Overlong forms never stand for the character they encode (a byte-token model likes E0 80 A0).
  auto space = compile("root ::= \" \"\n");
  EXPECT_FALSE(matches(space, "\xE0\x80\xA0", false));
  EXPECT_FALSE(matches(space, "\xC0\xA0", false));
  EXPECT_FALSE(matches(space, "\xE0", false)); // no three-byte character is a space: refused at the lead
  EXPECT_FALSE(matches(compile("root ::= [\\x00-\\x7F\\u00e9]\n"), "\xE0", false));
  EXPECT_FALSE(matches(any, "\xF0\x80\x80\x80"));
  EXPECT_TRUE(matches(any, "\xE0\xA0\x80")); // U+0800, the first three-byte character
}

TEST(Gbnf, Errors) {
  EXPECT_EQ(parseError("root ::= foo\n"), "line 1, column 10: undefined rule 'foo'");
  EXPECT_EQ(parseError("a ::= \"x\"\n"),
            "line 2, column 1: the grammar has no 'root' rule (the start symbol)");
  EXPECT_NE(
      parseError("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n").find("rule 'expr' is left-recursive"),
      std::string::npos);
  // Left recursion through a rule that matches the empty string.
  EXPECT_NE(parseError("root ::= opt root \"x\" | \"y\"\nopt ::= \"a\"?\n").find("left-recursive"),
            std::string::npos);
  EXPECT_EQ(parseError("root ::= \"abc\n"), "line 1, column 10: unterminated string literal");
  EXPECT_EQ(parseError("root ::= \"\\q\"\n").rfind("line 1, column 11: unknown escape '\\q'", 0), 0u);
  EXPECT_EQ(parseError("root ::= [z-a]\n"), "line 1, column 10: character range U+7A-U+61 is reversed");
  EXPECT_EQ(parseError("root ::= \"a\"{3000}\n"),
            "line 1, column 13: repetition counts above 2000 are refused");
  EXPECT_EQ(parseError("root ::= \"a\"{3,2}\n"),
            "line 1, column 13: repetition {3,2}: the maximum is below the minimum");
  EXPECT_EQ(parseError("root ::= *\n"), "line 1, column 10: a repetition (* + ? {}) needs an item before it");
  EXPECT_EQ(parseError("root ::= \"a\"\nroot ::= \"b\"\n"), "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(parseError("root ::= ( \"a\"\n"), "line 1, column 10: unclosed '(' (expected ')')");
  EXPECT_EQ(
      parseError("root ::= \"a\" )\n"),
      "line 1, column 14: unexpected ')' in rule 'root' (expected a symbol, '|' or the end of the line)");
  EXPECT_EQ(parseError("root = \"a\"\n"), "line 1, column 6: expected '::=' after the rule name 'root'");
  EXPECT_EQ(parseError(""), "line 1, column 1: the grammar has no 'root' rule (the start symbol)");
  // Untrusted input: deep nesting and long rule chains are errors or fine, never a stack overflow.
  EXPECT_EQ(parseError("root ::= " + std::string(100000, '(')),
            "line 1, column 210: groups nested deeper than 200");
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 200000; ++i)
    chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r200000 ::= \"x\"\n";
  EXPECT_TRUE(parseGbnf(chain));
}

TEST(Gbnf, DeepStacksCompact) {
  // A grammar whose stack grows with the text; past kCompactStates the automaton keeps only the current
  // state (copied without recursion) and still matches.
  auto g = compile("root ::= \"(\" root \")\" | \"x\"\n");
  Automaton a(g);
  int32_t s = a.start();
  for (int i = 0; i < 20000; ++i)
    s = a.next(s, '(');
  ASSERT_NE(s, Automaton::kDead);
  s = a.compact(s);
  EXPECT_EQ(a.stateCount(), 1u);
  s = a.next(s, 'x');
  for (int i = 0; i < 20000; ++i)
    s = a.next(s, ')');
  ASSERT_NE(s, Automaton::kDead);
  EXPECT_TRUE(a.mustEnd(s));
}

TEST(Gbnf, CharClassIntersects) {
  CharClass c{{{'a', 'c'}, {'x', 'z'}}, false};
  EXPECT_TRUE(c.intersects('b', 'd'));
  EXPECT_FALSE(c.intersects('d', 'w'));
  CharClass n{{{'a', 'c'}, {'d', 'z'}}, true};
  EXPECT_FALSE(n.intersects('a', 'z'));
  EXPECT_TRUE(n.intersects('a', '{'));
  EXPECT_TRUE(n.matches('A'));
  EXPECT_TRUE(c.covers('x', 'z'));
  EXPECT_FALSE(c.covers('b', 'x'));
  EXPECT_TRUE(n.covers('{', 0x10FFFF));
  EXPECT_FALSE(n.covers('A', 'a'));
  EXPECT_FALSE(n.matches('q'));
}

//===----------------------------------------------------------------------===//
// JSON schema -> GBNF
//===----------------------------------------------------------------------===//

namespace {

std::shared_ptr<const Grammar> schemaGrammar(const json &schema) {
  auto rules = jsonSchemaToGbnf(schema, "root");
  EXPECT_TRUE(rules) << rules.message();
  return rules ? compile(*rules) : nullptr;
}

std::string schemaError(const json &schema) {
  auto rules = jsonSchemaToGbnf(schema, "root");
  EXPECT_FALSE(rules) << "accepted: " << schema.dump();
  return rules ? "" : rules.message();
}

} // namespace

TEST(JsonSchema, Primitives) {
  auto s = schemaGrammar(json::parse(R"({"type": "string"})"));
  EXPECT_TRUE(matches(s, R"("h\u00e9llo \"x\"\n")"));
  EXPECT_TRUE(matches(s, "\"h\xC3\xA9\""));
  EXPECT_FALSE(matches(s, "\"a\nb\"")); // a raw control character
  EXPECT_FALSE(matches(s, "\"abc"));
  auto i = schemaGrammar(json::parse(R"({"type": "integer"})"));
  EXPECT_TRUE(matches(i, "-120"));
  EXPECT_FALSE(matches(i, "012"));
  EXPECT_FALSE(matches(i, "1.5"));
  auto n = schemaGrammar(json::parse(R"({"type": "number"})"));
  EXPECT_TRUE(matches(n, "-0.25e+10"));
  EXPECT_FALSE(matches(n, "1."));
  auto b = schemaGrammar(json::parse(R"({"type": ["boolean", "null"]})"));
  EXPECT_TRUE(matches(b, "true"));
  EXPECT_TRUE(matches(b, "null"));
  EXPECT_FALSE(matches(b, "0"));
  auto len = schemaGrammar(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
  EXPECT_FALSE(matches(len, "\"a\""));
  EXPECT_TRUE(matches(len, "\"a\\n\""));
  EXPECT_TRUE(matches(len, "\"abc\""));
  EXPECT_FALSE(matches(len, "\"abcd\""));
  // The complete top-level value ends the generation: nothing may follow a closed string.
  Automaton a(len);
  EXPECT_TRUE(a.mustEnd(a.walk(a.start(), "\"ab\"")));
}

TEST(JsonSchema, IntegerBounds) {
  auto g = schemaGrammar(json::parse(R"({"type": "integer", "minimum": 5, "maximum": 123})"));
  for (const char *ok : {"5", "9", "10", "99", "100", "120", "123"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char *no : {"4", "0", "05", "124", "130", "200", "-1", "1000"})
    EXPECT_FALSE(matches(g, no)) << no;
  auto neg = schemaGrammar(json::parse(R"({"type": "integer", "minimum": -20, "exclusiveMaximum": -2})"));
  for (const char *ok : {"-3", "-20", "-10", "-19"})
    EXPECT_TRUE(matches(neg, ok)) << ok;
  for (const char *no : {"-2", "-21", "0", "3", "-0"})
    EXPECT_FALSE(matches(neg, no)) << no;
  auto up = schemaGrammar(json::parse(R"({"type": "integer", "exclusiveMinimum": 0})"));
  EXPECT_TRUE(matches(up, "1"));
  EXPECT_TRUE(matches(up, "9999999999999999"));
  EXPECT_FALSE(matches(up, "0"));
  EXPECT_FALSE(matches(up, "-1"));
  auto down = schemaGrammar(json::parse(R"({"type": "integer", "maximum": 7.5})"));
  for (const char *ok : {"-100", "0", "7"})
    EXPECT_TRUE(matches(down, ok)) << ok;
  for (const char *no : {"8", "10", "-0"})
    EXPECT_FALSE(matches(down, no)) << no;
  // Brute force over a window: exactly the integers of the range match.
  auto win = schemaGrammar(json::parse(R"({"type": "integer", "minimum": -37, "maximum": 1042})"));
  for (int v = -1200; v <= 1200; ++v)
    EXPECT_EQ(matches(win, std::to_string(v)), v >= -37 && v <= 1042) << v;
}

TEST(JsonSchema, EnumConstAnyOf) {
  auto e = schemaGrammar(json::parse(R"({"enum": ["red", 3, null, {"a": [1]}]})"));
  EXPECT_TRUE(matches(e, "\"red\""));
  EXPECT_TRUE(matches(e, "3"));
  EXPECT_TRUE(matches(e, "null"));
  EXPECT_TRUE(matches(e, R"({"a":[1]})"));
  EXPECT_FALSE(matches(e, "\"blue\""));
  auto c = schemaGrammar(json::parse(R"({"const": "x\"y"})"));
  EXPECT_TRUE(matches(c, R"("x\"y")"));
  EXPECT_FALSE(matches(c, R"("xy")"));
  auto any =
      schemaGrammar(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})"));
  EXPECT_TRUE(matches(any, "5"));
  EXPECT_TRUE(matches(any, "\"a\""));
  EXPECT_FALSE(matches(any, "\"ab\""));
  auto one = schemaGrammar(json::parse(R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})"));
  EXPECT_TRUE(matches(one, "false"));
  EXPECT_FALSE(matches(one, "1"));
}

TEST(JsonSchema, Objects) {
  auto g = schemaGrammar(json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array"}},
    "required": ["name", "age"], "additionalProperties": false})"));
  EXPECT_TRUE(matches(g, R"({"name":"a","age":3})"));
  EXPECT_TRUE(matches(g, R"({ "name": "a", "age": 3, "tags": [1, "x"] })"));
  EXPECT_TRUE(matches(g, "{\n  \"name\": \"a\",\n  \"age\": 3\n}"));
  EXPECT_FALSE(matches(g, R"({"name":  "a","age":3})")); // whitespace: one space or a newline and indentation
  EXPECT_FALSE(matches(g, "{\n\n\"name\":\"a\",\"age\":3}"));
  EXPECT_FALSE(matches(g, R"({"name":"a"})"));               // age is required
  EXPECT_FALSE(matches(g, R"({"age":3,"name":"a"})"));       // keys come in the order of `required`
  EXPECT_FALSE(matches(g, R"({"name":"a","age":3,"x":1})")); // additionalProperties: false
  EXPECT_FALSE(matches(g, R"({"name":"a","age":"3"})"));
  // No required key: any subset of the optional ones, in order, commas right.
  auto o =
      schemaGrammar(json::parse(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})"));
  EXPECT_TRUE(matches(o, "{}"));
  EXPECT_TRUE(matches(o, R"({"b":1})"));
  EXPECT_TRUE(matches(o, R"({"a":1,"b":2})"));
  EXPECT_FALSE(matches(o, R"({,"b":1})"));
  EXPECT_FALSE(matches(o, R"({"a":1,})"));
  // additionalProperties as a schema: more keys, never a declared name.
  auto extra = schemaGrammar(json::parse(
      R"({"properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": {"type": "boolean"}})"));
  EXPECT_TRUE(matches(extra, R"({"id":1,"x":true,"i":false,"idx":true})"));
  EXPECT_FALSE(matches(extra, R"({"id":1,"id":true})"));
  EXPECT_FALSE(matches(extra, R"({"id":1,"x":2})"));
  // A bare object type is any object; nested objects.
  auto bare = schemaGrammar(json::parse(R"({"type": "object"})"));
  EXPECT_TRUE(matches(bare, R"({"k": {"n": [1, {"m": null}]}})"));
  EXPECT_FALSE(matches(bare, "[]"));
}

TEST(JsonSchema, Arrays) {
  auto g = schemaGrammar(
      json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1]"));
  EXPECT_TRUE(matches(g, "[1, 2,3]"));
  EXPECT_FALSE(matches(g, "[1,2,3,4]"));
  EXPECT_FALSE(matches(g, "[\"a\"]"));
  auto t = schemaGrammar(
      json::parse(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})"));
  EXPECT_TRUE(matches(t, "[\"a\",1]"));
  EXPECT_FALSE(matches(t, "[\"a\",1,2]"));
  EXPECT_FALSE(matches(t, "[1,\"a\"]"));
  auto more = schemaGrammar(
      json::parse(R"({"prefixItems": [{"type": "string"}], "items": {"type": "null"}, "maxItems": 2})"));
  EXPECT_TRUE(matches(more, "[\"a\"]"));
  EXPECT_TRUE(matches(more, "[\"a\",null]"));
  EXPECT_FALSE(matches(more, "[\"a\",null,null]"));
  auto any = schemaGrammar(json::parse(R"({"type": "array"})"));
  EXPECT_TRUE(matches(any, "[]"));
  EXPECT_TRUE(matches(any, "[{\"a\":[]}, 1.5]"));
}

TEST(JsonSchema, RefsAndRecursion) {
  auto g = schemaGrammar(json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(g, R"({"v":1,"kids":[{}]})"));
  auto d = schemaGrammar(json::parse(
      R"({"definitions": {"c": {"enum": ["x"]}}, "type": "array", "items": {"$ref": "#/definitions/c"}})"));
  EXPECT_TRUE(matches(d, R"(["x","x"])"));
  EXPECT_FALSE(matches(d, R"(["y"])"));
}

TEST(JsonSchema, AnnotationsIgnoredUnsupportedRefused) {
  auto g =
      schemaGrammar(json::parse(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T",
    "description": "d", "type": "boolean", "default": true, "examples": [false]})"));
  EXPECT_TRUE(matches(g, "true"));
  EXPECT_EQ(schemaError(json::parse(
                R"({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}})")),
            "'pattern' is not supported at #/properties/zip");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "string", "format": "date-time"})")),
            "'format' is not supported at #");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "array", "items": {"type": "number", "minimum": 0}})")),
            "'minimum' on a number is not supported (on an integer it is) at #/items");
  EXPECT_EQ(schemaError(json::parse(R"({"maximum": 3})")),
            "bounds without \"type\": \"integer\" are not supported at #");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "integer", "minimum": 5, "maximum": 4})")),
            "the bounds leave no integer at #");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "integer", "multipleOf": 2})")),
            "'multipleOf' is not supported at #");
  EXPECT_EQ(schemaError(json::parse(R"({"allOf": [{"type": "string"}]})")), "'allOf' is not supported at #");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "array", "uniqueItems": true})")),
            "'uniqueItems' is not supported at #");
  EXPECT_EQ(
      schemaError(json::parse(R"({"$ref": "https://example.com/s.json"})")),
      "'$ref' https://example.com/s.json is not local (only #/$defs/..., #/definitions/... and #) at #/$ref");
  EXPECT_EQ(schemaError(json::parse(R"({"$ref": "#/$defs/missing"})")),
            "'$ref' #/$defs/missing points at nothing in the schema at #/$ref");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "decimal"})")),
            "unknown type 'decimal' (string, number, integer, boolean, null, object, array) at #/type");
  EXPECT_EQ(schemaError(json::parse(R"({"type": "string", "maxLength": 1, "minLength": 2})")),
            "'maxLength' is below 'minLength' at #");
  EXPECT_EQ(schemaError(json(false)), "the schema 'false' matches nothing at #");
  json deep = {{"type", "integer"}};
  for (int i = 0; i < 1000; ++i)
    deep = {{"type", "array"}, {"items", deep}};
  EXPECT_NE(schemaError(deep).find("the schema nests deeper than 64 levels"), std::string::npos);
  EXPECT_EQ(schemaError(json(3)), "a schema must be an object or a boolean at #");
  EXPECT_FALSE(jsonSchemaToGbnf(json::object(), "bad name"));
}

TEST(JsonSchema, PrefixNamesEveryRule) {
  // Two schemas in one grammar: each converter names its rules under its prefix.
  auto a = jsonSchemaToGbnf(
      json::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})"),
      "tool-a");
  auto b = jsonSchemaToGbnf(json::parse(R"({"type": "array", "items": {"type": "string"}})"), "tool-b");
  ASSERT_TRUE(a && b);
  for (const std::string *rules : {&*a, &*b}) {
    const std::string prefix = rules == &*a ? "tool-a" : "tool-b";
    for (size_t at = 0; at < rules->size();) {
      const size_t end = rules->find('\n', at);
      EXPECT_EQ(rules->compare(at, prefix.size(), prefix), 0) << rules->substr(at, end - at);
      at = end + 1;
    }
  }
  auto g = compile("root ::= tool-a | tool-b\n" + *a + *b);
  EXPECT_TRUE(matches(g, R"({"x":1})"));
  EXPECT_TRUE(matches(g, R"(["p","q"])"));
  EXPECT_FALSE(matches(g, R"({"x":"1"})"));
  auto obj = compile(jsonObjectGbnf("root"));
  EXPECT_TRUE(matches(obj, R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(matches(obj, "[1]"));
  EXPECT_FALSE(matches(obj, "\"s\""));
}

//===----------------------------------------------------------------------===//
// Token-level matcher
//===----------------------------------------------------------------------===//

namespace {

/// An SPM vocabulary with byte tokens, multi-character pieces and control tokens.
rt::Tokenizer smallVocab() {
  rt::TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "<end_of_turn>"};
  d.tokenTypes = {2, 3, 3, 3};
  for (const char *t : {"{",
                        "}",
                        "\"",
                        "\":",
                        "a",
                        "ab",
                        "abc",
                        "\"a",
                        "\"ab\"",
                        "b",
                        ",",
                        "\xE2\x96\x81",
                        "\xE2\x96\x81\"",
                        "1",
                        "12",
                        "true",
                        "\xC3\xA9",
                        "x}",
                        "}\n",
                        "\xE2\x96\x81\xE2\x96\x81"})
    d.tokens.emplace_back(t), d.tokenTypes.push_back(1);
  for (int b : {0xC3, 0xA9, 0x22, 0x7D})
    d.tokens.push_back(fmt::format("<0x{:02X}>", b)), d.tokenTypes.push_back(6);
  d.unk = 0, d.bos = 1, d.eos = 2;
  return rt::Tokenizer(d);
}

int32_t idOf(const rt::Tokenizer &tok, const std::string &text) {
  const int32_t id = tok.find(text);
  EXPECT_GE(id, 0) << text;
  return id;
}

void expectMaskEqualsChecks(Matcher &m, size_t n) {
  std::vector<int32_t> mask;
  m.allowed(mask);
  std::vector<int32_t> each;
  for (size_t i = 0; i < n; ++i)
    if (m.accepts(static_cast<int32_t>(i)))
      each.push_back(static_cast<int32_t>(i));
  EXPECT_EQ(mask, each);
}

} // namespace

TEST(Matcher, MaskEqualsPerTokenCheckAndEnds) {
  rt::Tokenizer tok = smallVocab();
  Vocabulary v(tok);
  const int32_t eot = idOf(tok, "<end_of_turn>");
  auto g = schemaGrammar(
      json::parse(R"({"type": "object", "properties": {"ab": {"type": "string"}}, "required": ["ab"]})"));
  Matcher m(g, v, {eot}, true);
  expectMaskEqualsChecks(m, tok.size());
  EXPECT_TRUE(m.accepts(idOf(tok, "{")));
  EXPECT_FALSE(m.accepts(idOf(tok, "a")));
  EXPECT_FALSE(m.accepts(2));   // </s>: the grammar cannot end yet
  EXPECT_FALSE(m.accepts(eot)); // nor the template's end of turn
  EXPECT_FALSE(m.accepts(1));   // <s>: a control token never
  // {"ab":"é"} with the é as two byte tokens (a character split across tokens).
  for (const std::string &t : {"{", "\"a", "b", "\":", "\xE2\x96\x81\"", "<0xC3>"}) {
    ASSERT_TRUE(m.accept(idOf(tok, t))) << t;
    expectMaskEqualsChecks(m, tok.size());
  }
  EXPECT_FALSE(m.accepts(idOf(tok, "a"))); // the partial character needs its continuation byte
  EXPECT_TRUE(m.accepts(idOf(tok, "<0xA9>")));
  ASSERT_TRUE(m.accept(idOf(tok, "<0xA9>")));
  ASSERT_TRUE(m.accept(idOf(tok, "<0x22>")));
  expectMaskEqualsChecks(m, tok.size());
  EXPECT_FALSE(m.mustEnd());
  EXPECT_FALSE(m.accepts(idOf(tok, "}\n"))); // nothing may follow the closing brace
  ASSERT_TRUE(m.accept(idOf(tok, "}")));
  EXPECT_TRUE(m.canEnd());
  EXPECT_TRUE(m.mustEnd());
  std::vector<int32_t> mask;
  m.allowed(mask);
  EXPECT_EQ(mask, (std::vector<int32_t>{2, eot})); // only the end tokens
  EXPECT_GE(m.stats().masks, 1u);
  // ignore_eos: the end tokens stay refused.
  Matcher keep(g, v, {eot}, false);
  for (const std::string &t : {"{", "\"a", "b", "\":", "\xE2\x96\x81\"", "a", "\"", "}"})
    ASSERT_TRUE(keep.accept(idOf(tok, t))) << t;
  EXPECT_FALSE(keep.accepts(2));
  EXPECT_FALSE(keep.accept(idOf(tok, "a")));
}

namespace {

/// Logits of n tokens; the filter allows `allow` and counts its calls.
struct CountingFilter : rt::TokenFilter {
  std::vector<int32_t> allow;
  int checks = 0, masks = 0;
  bool accepts(int32_t id) override {
    ++checks;
    return std::find(allow.begin(), allow.end(), id) != allow.end();
  }
  void allowed(std::vector<int32_t> &ids) override {
    ++masks;
    ids = allow;
  }
};

} // namespace

TEST(Matcher, SamplerChecksFirstMasksOnRefusal) {
  std::vector<float> logits = {0.f, 5.f, 1.f, 4.f, 2.f, 3.f};
  rt::Sampler greedy(rt::SamplerParams{});
  CountingFilter f;
  f.allow = {1, 2};
  EXPECT_EQ(greedy.sample(logits.data(), logits.size(), f), 1);
  EXPECT_EQ(f.masks, 0); // the argmax was allowed: no mask
  f.allow = {0, 2, 4};
  EXPECT_EQ(greedy.sample(logits.data(), logits.size(), f), 4);
  EXPECT_EQ(f.masks, 1);
  f.allow = {};
  EXPECT_THROW(greedy.sample(logits.data(), logits.size(), f), rt::SamplerError);
}

TEST(Matcher, SamplerDrawsTheRestrictedDistribution) {
  // Temperature 1, no truncation: the constrained draw must follow softmax over the allowed tokens.
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, 1.5f};
  rt::SamplerParams p;
  p.temperature = 1.0f, p.topP = 1.0f, p.minP = 0.0f, p.topK = 0, p.seed = 7;
  rt::Sampler s(p);
  CountingFilter f;
  f.allow = {1, 2, 3};
  const int n = 40000;
  std::vector<int> hits(5, 0);
  for (int i = 0; i < n; ++i)
    ++hits[static_cast<size_t>(s.sample(logits.data(), logits.size(), f))];
  EXPECT_EQ(hits[0] + hits[4], 0);
  double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  const double want[] = {std::exp(1.0) / z, std::exp(0.5) / z, 1.0 / z};
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(double(hits[static_cast<size_t>(k + 1)]) / n, want[k], 0.01) << "token " << k + 1;
  // The same seed gives the same tokens.
  rt::Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(a.sample(logits.data(), logits.size(), f), b.sample(logits.data(), logits.size(), f));
}
