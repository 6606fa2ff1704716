//===- ApiGrammarTest.cpp - structured-output fields of a request ----------===//
//
// response_format (text, json_object, json_schema), json_schema and grammar: each gives the compiled
// grammar the scheduler runs, and each bad form is a 400 naming its field.
//===----------------------------------------------------------------------===//
#include "server/ApiGrammar.h"

#include <gtest/gtest.h>

using namespace tpc;
using namespace tpc::server;
using json = nlohmann::json;

namespace {

std::optional<ApiError> run(const std::string &body, GenerationParams &gen) {
  gen = GenerationParams{};
  return requestGrammar(json::parse(body), gen);
}

} // namespace

TEST(ApiGrammar, Forms) {
  GenerationParams g;
  EXPECT_FALSE(run(R"({"response_format": {"type": "text"}})", g));
  EXPECT_FALSE(g.grammar);
  EXPECT_TRUE(g.gbnf.empty());
  EXPECT_FALSE(run(R"({"response_format": {"type": "json_object"}})", g));
  EXPECT_TRUE(g.grammar);
  EXPECT_FALSE(run(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
                     "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})",
                   g));
  ASSERT_TRUE(g.grammar);
  EXPECT_NE(g.gbnf.find("root ::= "), std::string::npos);
  EXPECT_FALSE(run(R"({"json_schema": {"type": "integer"}})", g));
  EXPECT_TRUE(g.grammar);
  EXPECT_FALSE(run(R"({"grammar": "root ::= [0-9]+\n"})", g));
  EXPECT_TRUE(g.grammar);
  EXPECT_FALSE(run(R"({"grammar": ""})", g)); // llama-server's clients send "" for none
  EXPECT_FALSE(g.grammar);
}

TEST(ApiGrammar, ErrorsNameTheField) {
  GenerationParams g;
  auto e = run(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                  "schema": {"type": "string", "pattern": "a+"}}}})",
               g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "response_format.json_schema.schema");
  EXPECT_EQ(e->message, "'response_format.json_schema.schema' 'pattern' is not supported at #");
  e = run(R"({"grammar": "root ::= foo\n"})", g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "grammar");
  EXPECT_EQ(e->message, "'grammar' is not a valid grammar: line 1, column 10: undefined rule 'foo'");
  e = run(R"({"json_schema": {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}})",
          g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "json_schema");
  EXPECT_NE(e->message.find("'multipleOf' is not supported at #/properties/a"), std::string::npos);
  e = run(R"({"response_format": {"type": "xml"}})", g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format.type");
  e = run(R"({"response_format": "json"})", g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format");
  e = run(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}})",
          g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format.json_schema.strict");
  e = run(R"({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\"\n"})", g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "grammar");
  EXPECT_NE(e->message.find("cannot be combined with 'response_format'"), std::string::npos);
  // A forced tool call's grammar, set before the request fields are read, is compiled with them.
  g = GenerationParams{};
  g.gbnf = "root ::= \"call\"\n";
  EXPECT_FALSE(requestGrammar(json::parse("{}"), g));
  EXPECT_TRUE(g.grammar);
  g = GenerationParams{};
  g.gbnf = "root ::= call\n";
  e = requestGrammar(json::parse("{}"), g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tool_choice");
  g = GenerationParams{};
  g.gbnf = "root ::= \"call\"\n";
  e = requestGrammar(json::parse(R"({"response_format": {"type": "json_object"}})"), g);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("forced tool call"), std::string::npos);
  e = run(R"({"grammar": 5})", g);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "grammar");
}
