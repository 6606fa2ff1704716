//===- DropInRoutes.h - the routes that make tpc serve a llama-server drop-in -*- C++ -*-===//
//
// llama-server's native routes (server/NativeApi.cpp): POST /completion, GET /props, GET /slots,
// POST /apply-template, GET /models; Anthropic's POST /v1/messages (server/AnthropicApi.cpp); OpenAI's
// Responses API POST /v1/responses (server/ResponsesApi.cpp); and OpenAI's n > 1 (server/Choices.cpp).
// Each translates its body into a CompletionRequest through Api::parseCompletion (so every field is
// checked once, the same way) and answers through server/Relay.h on the one scheduler.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_DROPINROUTES_H
#define TPC_SERVER_DROPINROUTES_H

#include "server/Relay.h"

namespace httplib {
class Server;
}

namespace tpc::server {

/// Registers every route of the file comment but n > 1.
void addDropInRoutes(httplib::Server &h, const RouteContext &ctx);
void addAnthropicRoutes(httplib::Server &h, const RouteContext &ctx);
void addResponsesRoutes(httplib::Server &h, const RouteContext &ctx);

/// Answers an OpenAI completion or chat request with cr.n > 1 choices, streamed or not.
void answerChoices(const RouteContext &ctx, httplib::Response &res, const CompletionRequest &cr);

/// llama-server's /metrics names (llamacpp:...), appended to tpc's own.
std::string llamaMetricsText(const SchedulerStats &s, const std::vector<SlotState> &slots,
                             int64_t ctxPerSlot);

/// llama-server's generation_settings object for `g` (in /completion's answer, /slots and /props).
nlohmann::json generationSettings(const Api &api, const GenerationParams &g);

/// Parses a JSON object body or returns the 400 that says why not.
std::optional<ApiError> parseObject(const std::string &body, nlohmann::json &out);

} // namespace tpc::server

#endif // TPC_SERVER_DROPINROUTES_H
