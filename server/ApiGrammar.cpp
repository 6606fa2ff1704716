//===- ApiGrammar.cpp - the grammar a completion request asks for ---------===//
#include "server/ApiGrammar.h"

#include "server/grammar/Gbnf.h"
#include "server/grammar/JsonSchema.h"

#include <fmt/core.h>

namespace tpc::server {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string &field, const std::string &what) {
  return ApiError{400, fmt::format("'{}' {}", field, what), "invalid_request_error", field, ""};
}

/// gen.gbnf from a schema, naming `field` in errors.
std::optional<ApiError> fromSchema(const json &schema, const std::string &field, std::string &gbnf) {
  auto rules = grammar::jsonSchemaToGbnf(schema, "root");
  if (!rules)
    return bad(field, rules.message());
  gbnf = rules.take();
  return std::nullopt;
}

} // namespace

std::optional<ApiError> compileGrammar(GenerationParams &gen, const std::string &field) {
  gen.grammar.reset();
  if (gen.gbnf.empty())
    return std::nullopt;
  auto g = grammar::parseGbnf(gen.gbnf);
  if (!g)
    return bad(field, "is not a valid grammar: " + g.message());
  gen.grammar = g.take();
  return std::nullopt;
}

std::optional<ApiError> requestGrammar(const json &body, GenerationParams &gen) {
  std::string gbnf, field;
  auto set = [&](const std::string &f) -> std::optional<ApiError> {
    if (!field.empty())
      return bad(f, fmt::format("cannot be combined with '{}': one constraint per request", field));
    field = f;
    return std::nullopt;
  };
  auto present = [&](const char *key) { return body.contains(key) && !body[key].is_null(); };
  if (present("response_format")) {
    const json &rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return bad("response_format",
                 "must be an object with a string 'type' (text, json_object, json_schema)");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      if (auto e = set("response_format"))
        return e;
      if (rf.contains("schema") && !rf["schema"].is_null()) {
        if (auto e = fromSchema(rf["schema"], "response_format.schema", gbnf))
          return e;
      } else {
        gbnf = grammar::jsonObjectGbnf("root");
      }
    } else if (type == "json_schema") {
      if (auto e = set("response_format"))
        return e;
      const json *js = rf.contains("json_schema") ? &rf["json_schema"] : nullptr;
      if (!js || !js->is_object())
        return bad("response_format.json_schema", "must be an object {\"name\", \"schema\", \"strict\"}");
      if (js->contains("strict") && !(*js)["strict"].is_boolean())
        return bad("response_format.json_schema.strict", "must be a boolean");
      if (js->contains("schema") && !(*js)["schema"].is_null()) {
        if (auto e = fromSchema((*js)["schema"], "response_format.json_schema.schema", gbnf))
          return e;
      } else {
        gbnf = grammar::jsonObjectGbnf("root"); // OpenAI's schema is optional: any JSON object
      }
    } else if (type != "text") {
      return bad("response_format.type",
                 fmt::format("'{}' is not one of text, json_object, json_schema", type));
    }
  }
  if (present("json_schema")) {
    if (auto e = set("json_schema"))
      return e;
    if (auto e = fromSchema(body["json_schema"], "json_schema", gbnf))
      return e;
  }
  if (present("grammar")) {
    if (!body["grammar"].is_string())
      return bad("grammar", "must be a string of GBNF rules");
    if (!body["grammar"].get<std::string>().empty()) {
      if (auto e = set("grammar"))
        return e;
      gbnf = body["grammar"].get<std::string>();
    }
  }
  if (field.empty() || gbnf.empty()) // a forced tool call's grammar (set before) is compiled here too
    return gen.gbnf.empty() || gen.grammar ? std::nullopt : compileGrammar(gen, "tool_choice");
  if (!gen.gbnf.empty())
    return bad(field, "cannot be combined with a forced tool call (it has its own grammar)");
  gen.gbnf = std::move(gbnf);
  return compileGrammar(gen, field);
}

} // namespace tpc::server
