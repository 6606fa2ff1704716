//===- Relay.h - running a parsed request and answering it --------*- C++ -*-===//
//
// What every completion route shares once its body is a CompletionRequest: submitting it (n > 1: n
// independent requests, choice i seeded seed + i, so a given seed gives the same n choices every time),
// waiting for the results, or streaming the events of all choices as server-sent events through a
// StreamWriter that knows the route's shapes (OpenAI chunks, /completion's objects, Anthropic's and the
// Responses API's typed events). Streaming polls the choices in turn and writes an SSE comment when
// nothing came for a heartbeat, so a client that went away is noticed and its requests cancelled.
// RouteContext is what a route file needs of the Server (server/Server.cpp fills it): the scheduler,
// the Api, the options and the in-flight count shutdown() waits for.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_RELAY_H
#define TPC_SERVER_RELAY_H

#include "server/Server.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace httplib {
struct Response;
}

namespace tpc::server {

/// What the route files (NativeApi.cpp, AnthropicApi.cpp, ResponsesApi.cpp) need of the Server.
struct RouteContext {
  Scheduler &sched;
  const Api &api;
  const ServerOptions &opts;
  std::function<void()> enter, leave; ///< a completion response begins / is fully written
  int64_t started = 0;                ///< the server's start (unix seconds)
};

/// Writes `e` as the response (its status and error object).
void sendError(httplib::Response &res, const ApiError &e);
/// A fresh response id: PREFIX-<16 hex digits>.
std::string newId(const char *prefix);

/// Submits `cr` cr.n times (see the file comment); on an error none stays submitted.
std::optional<ApiError> submitChoices(Scheduler &sched, const CompletionRequest &cr,
                                      std::vector<std::shared_ptr<Request>> &out);
/// Waits for all of `req`'s events (the request runs to its finish) and gathers them into `r`.
void collectResult(Request &req, CompletionResult &r);
/// Waits for every request to finish. An error or cancellation of any is returned as a 500.
std::optional<ApiError> collectChoices(const std::vector<std::shared_ptr<Request>> &reqs,
                                       std::vector<CompletionResult> &out);

/// A route's streamed shapes; each call appends SSE text to `out`.
class StreamWriter {
public:
  virtual ~StreamWriter() = default;
  /// Before any event (a chat stream's role chunk, Anthropic's message_start, ...).
  virtual void start(std::string &out) { (void)out; }
  virtual void token(size_t choice, const TokenOut &t, std::string &out) = 0;
  /// One choice finished (Stop or Length; trailing text is in f.trailingText).
  virtual void finish(size_t choice, const Finish &f, std::string &out) = 0;
  /// Every choice finished.
  virtual void end(std::string &out) { (void)out; }
  /// A choice failed or was cancelled: the stream ends after this.
  virtual void error(const std::string &message, std::string &out) = 0;
};

/// Streams `reqs` through `w` as text/event-stream (see the file comment). ctx.enter() was called;
/// ctx.leave() is called when the stream ends.
void streamChoices(const RouteContext &ctx, httplib::Response &res,
                   std::vector<std::shared_ptr<Request>> reqs, std::shared_ptr<StreamWriter> w);

/// "data: JSON\n\n".
std::string sse(const nlohmann::json &j);
/// "event: NAME\ndata: JSON\n\n" (Anthropic's and the Responses API's typed events).
std::string sseEvent(const std::string &name, const nlohmann::json &j);

} // namespace tpc::server

#endif // TPC_SERVER_RELAY_H
