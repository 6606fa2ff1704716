//===- JsonSchema.h - JSON schema -> GBNF ---------------------------*- C++ -*-===//
//
// Turns a JSON schema into GBNF rules (Gbnf.h) whose root rule is named `rulePrefix`; every other rule is
// named `rulePrefix-...`, so several schemas (a response format, each tool's arguments) can share one
// grammar. The output is JSON with bounded whitespace inside objects and arrays (one space, or a newline and
// at most 20 spaces or tabs of indentation: a model whose best token was refused would otherwise pick
// whitespace again and again), none after the top-level value: a complete object ends the generation.
//
// Supported: type (one or an array), minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers
// (digit by digit, within the 16 digits the integer rule writes), properties, required, additionalProperties
// (false; true or a schema: more keys, never one of the declared names), enum, const, anyOf, oneOf (as anyOf:
// a value matching two branches would fail oneOf), items, prefixItems, minItems, maxItems, minLength,
// maxLength, nested objects, local $ref (#/$defs/..., #/definitions/..., #), true/{} (any JSON value). Object
// keys come in the order of `required`, then the optional ones by name (nlohmann::json keeps no key order).
// Without additionalProperties only the declared properties are generated (the output is still valid, models
// otherwise invent keys), as llama.cpp does.
// Ignored by design (annotations): title, description, $schema, $id, $comment, default, examples,
// deprecated, readOnly, writeOnly, contentEncoding, contentMediaType, and keywords JSON Schema does not
// define. Every other validation keyword (pattern, format, minimum, allOf, uniqueItems, ...) is an error
// naming it and its JSON path ("'pattern' is not supported at #/properties/zip"; bounds on a non-integer
// number too): a constraint is never
// silently dropped.
//
// Usage (the tools helper builds one grammar from several):
//   auto rules = jsonSchemaToGbnf(schema, "root");   // "root ::= ...\nroot-ws ::= ...\n..."
//   if (!rules) return Error{"response_format.json_schema.schema: " + rules.message()};
//   auto g = parseGbnf(*rules);
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_GRAMMAR_JSONSCHEMA_H
#define TPC_SERVER_GRAMMAR_JSONSCHEMA_H

#include "runtime/support/Expected.h"

#include <nlohmann/json.hpp>

#include <string>

namespace tpc::server::grammar {

/// GBNF rules for `schema` (see the file comment); `rulePrefix` must be a valid rule name.
Expected<std::string> jsonSchemaToGbnf(const nlohmann::json &schema, const std::string &rulePrefix);

/// GBNF rules for any JSON object (response_format json_object), root rule `rulePrefix`.
std::string jsonObjectGbnf(const std::string &rulePrefix);

/// `text` as a GBNF string literal (quotes and escapes added).
std::string gbnfLiteral(const std::string &text);

} // namespace tpc::server::grammar

#endif // TPC_SERVER_GRAMMAR_JSONSCHEMA_H
