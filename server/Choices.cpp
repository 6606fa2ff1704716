//===- Choices.cpp - OpenAI's n > 1: independent choices of one request ----===//
//
// Each choice is its own scheduler request (choice i seeded seed + i: a request with a seed gets the
// same n choices every time, and with temperature > 0 they differ from each other). The answer is the
// single-choice shapes of Api with the choices' indexes; usage counts the prompt once and every
// choice's tokens, as OpenAI does.
//===----------------------------------------------------------------------===//
#include "server/DropInRoutes.h"

#include <httplib.h>

#include <ctime>

namespace tpc::server {

using json = nlohmann::json;

namespace {

/// Sums the completion tokens of every choice into `f` (the first choice's finish).
Finish totalOf(const std::vector<Finish> &fs) {
  Finish f = fs.front();
  f.completionTokens = 0;
  for (const Finish &x : fs)
    f.completionTokens += x.completionTokens;
  return f;
}

class ChoicesWriter : public StreamWriter {
public:
  ChoicesWriter(const Api &api, CompletionRequest cr)
      : api_(api), cr_(std::move(cr)), id_(newId(cr_.chat ? "chatcmpl" : "cmpl")),
        created_(std::time(nullptr)), finishes_(static_cast<size_t>(cr_.n)) {}
  void start(std::string &out) override {
    if (cr_.chat) // every choice's role, alone
      for (int32_t i = 0; i < cr_.n; ++i)
        out += sse(indexed(api_.chunk(cr_, id_, created_, "", nullptr, nullptr, true), i));
  }
  void token(size_t i, const TokenOut &t, std::string &out) override {
    if (!t.text.empty() || cr_.gen.logprobs || cr_.returnTokens)
      out += sse(indexed(api_.chunk(cr_, id_, created_, t.text, &t, nullptr, false), i));
  }
  void finish(size_t i, const Finish &f, std::string &out) override {
    if (!f.trailingText.empty())
      out += sse(indexed(api_.chunk(cr_, id_, created_, f.trailingText, nullptr, nullptr, false), i));
    out += sse(indexed(api_.chunk(cr_, id_, created_, "", nullptr, &f, false), i));
    finishes_[i] = f;
  }
  void end(std::string &out) override {
    if (cr_.includeUsage) {
      json u = api_.chunk(cr_, id_, created_, "", nullptr, nullptr, false);
      u["choices"] = json::array();
      u["usage"] = Api::usage(totalOf(finishes_));
      out += sse(u);
    }
    out += "data: [DONE]\n\n";
  }
  void error(const std::string &message, std::string &out) override {
    out += "data: " + errorBody(ApiError{500, message, "server_error", "", ""}) + "\n\n";
  }

private:
  static json indexed(json chunk, size_t i) {
    chunk["choices"][0]["index"] = i;
    return chunk;
  }
  const Api &api_;
  CompletionRequest cr_;
  std::string id_;
  int64_t created_;
  std::vector<Finish> finishes_;
};

} // namespace

void answerChoices(const RouteContext &ctx, httplib::Response &res, const CompletionRequest &cr) {
  std::vector<std::shared_ptr<Request>> reqs;
  if (auto e = submitChoices(ctx.sched, cr, reqs))
    return sendError(res, *e);
  ctx.enter();
  if (cr.stream)
    return streamChoices(ctx, res, std::move(reqs), std::make_shared<ChoicesWriter>(ctx.api, cr));
  std::vector<CompletionResult> results;
  auto err = collectChoices(reqs, results);
  ctx.leave();
  if (err)
    return sendError(res, *err);
  json out = ctx.api.response(cr, results[0], newId(cr.chat ? "chatcmpl" : "cmpl"), std::time(nullptr));
  std::vector<Finish> finishes;
  out["choices"] = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    json choice = ctx.api.response(cr, results[i], "", 0)["choices"][0];
    choice["index"] = i;
    out["choices"].push_back(choice);
    finishes.push_back(results[i].finish);
  }
  out["usage"] = Api::usage(totalOf(finishes));
  res.set_content(dumpJson(out), "application/json");
}

} // namespace tpc::server
