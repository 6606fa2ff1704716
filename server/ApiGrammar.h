//===- ApiGrammar.h - the grammar a completion request asks for ---*- C++ -*-===//
//
// Structured output fields of a request body, turned into GBNF and compiled once, at parse time, so a bad
// schema or grammar is a 400 naming its field and never a failure inside the scheduler:
//   response_format {"type": "text"}                        no constraint
//                   {"type": "json_object"}                 any JSON object (llama-server: optional "schema")
//                   {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   json_schema     a schema (llama-server's field)
//   grammar         GBNF text (llama-server's field)
// At most one of them may constrain a request. The native /completion endpoint and the tools helper call
// requestGrammar / compileGrammar with the same meaning.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_APIGRAMMAR_H
#define TPC_SERVER_APIGRAMMAR_H

#include "server/Api.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace tpc::server {

/// Reads the structured-output fields of `body` into gen.gbnf and compiles it into gen.grammar. A gbnf set
/// before (a forced tool call) is compiled too (errors name 'tool_choice'); a request field beside it is a
/// 400.
std::optional<ApiError> requestGrammar(const nlohmann::json &body, GenerationParams &gen);

/// Compiles gen.gbnf into gen.grammar (empty gbnf: no grammar); an error names `field`.
std::optional<ApiError> compileGrammar(GenerationParams &gen, const std::string &field);

} // namespace tpc::server

#endif // TPC_SERVER_APIGRAMMAR_H
