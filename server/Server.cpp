//===- Server.cpp - the OpenAI-compatible HTTP server ----------------------===//
//
// Handlers never throw out (cpp-httplib's exception handler answers 500 in the error shape) and never
// touch the engine: they parse with Api, submit to the Scheduler and relay its events.
//===----------------------------------------------------------------------===//
#include "server/Server.h"

#include "server/Cors.h"
#include "server/DropInRoutes.h"
#include "server/Relay.h"
#include "server/WebPage.h"

#include <fmt/core.h>
#include <httplib.h>

#include <condition_variable>
#include <ctime>

namespace tpc::server {

using json = nlohmann::json;

struct Server::Counters {
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> requests; ///< (endpoint, status) -> count
  std::condition_variable cv;
  int inFlight = 0; ///< completion requests whose response is not fully written yet
  bool stopped = false;
  int64_t started = std::time(nullptr);

  void enter() {
    std::lock_guard<std::mutex> lock(mu);
    ++inFlight;
  }
  void leave() {
    {
      std::lock_guard<std::mutex> lock(mu);
      --inFlight;
    }
    cv.notify_all();
  }
};

namespace {

const char *const kEndpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                                  "/metrics", "/tokenize", "/detokenize", "/", "/completion", "/props",
                                  "/slots", "/apply-template", "/models", "/v1/messages", "/v1/responses"};

/// Constant-time comparison, so the key cannot be guessed byte by byte from response times.
bool sameKey(const std::string &a, const std::string &b) {
  if (a.size() != b.size())
    return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

/// State of one streamed response, shared by cpp-httplib's content provider calls.
struct Stream {
  std::shared_ptr<Request> req;
  CompletionRequest cr;
  std::string id;
  int64_t created = 0;
  bool first = true, done = false;
};

} // namespace

Server::Server(Scheduler &sched, const Api &api, ServerOptions opts)
    : sched_(sched), api_(api), opts_(std::move(opts)), http_(std::make_unique<httplib::Server>()),
      counters_(std::make_unique<Counters>()) {
  const int threads = opts_.httpThreads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(opts_.maxBodyBytes);
  if (opts_.ioTimeout.count() > 0) {
    http_->set_read_timeout(opts_.ioTimeout.count(), 0);
    http_->set_write_timeout(opts_.ioTimeout.count(), 0);
  }
  routes();
}

Server::~Server() = default;

Expected<int> Server::bind() {
  int port = opts_.port;
  bool ok = false;
  if (port == 0) {
    port = http_->bind_to_any_port(opts_.host);
    ok = port > 0;
  } else {
    ok = http_->bind_to_port(opts_.host, port);
  }
  if (!ok)
    return Error{fmt::format("--host {} --port {}: cannot listen there (address in use or not local?); pick "
                             "another --port",
                             opts_.host, opts_.port)};
  return port;
}

void Server::serve() { http_->listen_after_bind(); }

void Server::shutdown() {
  sched_.drain();
  sched_.waitIdle();
  {
    std::unique_lock<std::mutex> lock(counters_->mu);
    counters_->cv.wait_for(lock, opts_.drainTimeout, [&] { return counters_->inFlight == 0; });
    counters_->stopped = true;
  }
  http_->stop();
}

void Server::routes() {
  httplib::Server &h = *http_;
  Counters &c = *counters_;

  h.set_logger([&c](const httplib::Request &req, const httplib::Response &res) {
    std::string endpoint = "other";
    for (const char *e : kEndpoints)
      if (req.path == e)
        endpoint = e;
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.requests[{endpoint, res.status}];
  });
  h.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty())
      return;
    ApiError e{res.status, fmt::format("{} {}: HTTP {}", req.method, req.path, res.status),
               res.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
    if (res.status == 404)
      e.message = fmt::format("no route {} {} (see GET /v1/models, POST /v1/chat/completions)", req.method, req.path);
    if (res.status == 413)
      e.message = "the request body is larger than the server's limit (--max-body-bytes)";
    res.set_content(errorBody(e), "application/json");
  });
  h.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception &e) {
      what = e.what();
    } catch (...) {
    }
    sendError(res, ApiError{500, what, "server_error", "", ""});
  });
  h.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    // CORS first: a preflight carries no credentials (server/Cors.h).
    switch (applyCors(opts_.cors, req, res)) {
    case CorsResult::Refused:
      sendError(res, ApiError{403, fmt::format("origin '{}' is not allowed (the server's --cors-origins)",
                                               req.get_header_value("Origin")),
                              "permission_error", "", "origin_not_allowed"});
      return httplib::Server::HandlerResponse::Handled;
    case CorsResult::Preflight:
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    default:
      break;
    }
    if (opts_.apiKey.empty() || req.path == "/health" || (req.path == "/" && req.method == "GET"))
      return httplib::Server::HandlerResponse::Unhandled;
    // OpenAI's header, or Anthropic's x-api-key (/v1/messages clients send that one).
    if (sameKey(req.get_header_value("Authorization"), "Bearer " + opts_.apiKey) ||
        sameKey(req.get_header_value("x-api-key"), opts_.apiKey))
      return httplib::Server::HandlerResponse::Unhandled;
    sendError(res, ApiError{401,
                            "Invalid API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY') with "
                            "the server's --api-key",
                            "authentication_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  RouteContext ctx{sched_, api_, opts_, [&c] { c.enter(); }, [&c] { c.leave(); }, c.started};

  auto completion = [this, &c, ctx](bool chat) {
    return [this, &c, chat, ctx](const httplib::Request &req, httplib::Response &res) {
      CompletionRequest cr;
      if (auto e = api_.parseCompletion(req.body, chat, cr))
        return sendError(res, *e);
      if (cr.n > 1) // n independent choices (server/DropInRoutes.h)
        return answerChoices(ctx, res, cr);
      auto submitted = sched_.submit(cr.prompt, cr.gen);
      if (!submitted) {
        const bool draining = sched_.stats().draining;
        return sendError(res, ApiError{draining ? 503 : 400, submitted.message(),
                                       draining ? "server_error" : "invalid_request_error", "", ""});
      }
      auto st = std::make_shared<Stream>();
      st->req = submitted.take();
      st->cr = std::move(cr);
      st->id = newId(chat ? "chatcmpl" : "cmpl");
      st->created = std::time(nullptr);
      c.enter();
      if (!st->cr.stream) {
        CompletionResult r;
        collectResult(*st->req, r);
        c.leave();
        if (r.finish.reason == FinishReason::Error || r.finish.reason == FinishReason::Cancelled)
          return sendError(res, ApiError{500, r.finish.error.empty() ? "the request was cancelled" : r.finish.error,
                                         "server_error", "", ""});
        res.set_content(dumpJson(api_.response(st->cr, r, st->id, st->created)), "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, st](size_t, httplib::DataSink &sink) {
            if (st->done) {
              sink.done();
              return true;
            }
            if (st->first && st->cr.chat) { // the role alone, at once
              const std::string role =
                  sse(api_.chunk(st->cr, st->id, st->created, "", nullptr, nullptr, true));
              st->first = false;
              if (!sink.write(role.data(), role.size())) {
                st->req->cancel();
                return false;
              }
            }
            Event e;
            if (!st->req->next(e, opts_.heartbeat)) {
              static const std::string beat = ": keep-alive\n\n";
              if (!sink.write(beat.data(), beat.size())) {
                st->req->cancel();
                return false;
              }
              return true;
            }
            std::string out;
            do { // everything already queued goes out in one write
              const CompletionRequest &cr = st->cr;
              if (e.kind == Event::Kind::Token) {
                for (const json &c : api_.chunks(cr, st->id, st->created, e.token.text, &e.token, st->first))
                  out += sse(c);
                continue;
              }
              const Finish &f = e.finish;
              st->done = true;
              if (f.reason == FinishReason::Error || f.reason == FinishReason::Cancelled) {
                out += "data: " + errorBody(ApiError{500, f.error.empty() ? "cancelled" : f.error, "server_error", "", ""}) +
                       "\n\n";
                break;
              }
              for (const json &c : api_.finalChunks(cr, st->id, st->created, f, st->first))
                out += sse(c);
              if (cr.includeUsage) {
                json u = api_.chunk(cr, st->id, st->created, "", nullptr, nullptr, false);
                u["choices"] = json::array();
                u["usage"] = Api::usage(f);
                out += sse(u);
              }
              out += "data: [DONE]\n\n";
              break;
            } while (st->req->next(e, std::chrono::milliseconds(0)));
            if (!out.empty() && !sink.write(out.data(), out.size())) {
              st->req->cancel();
              return false;
            }
            if (st->done)
              sink.done();
            return true;
          },
          [st, &c](bool) {
            st->req->cancel(); // no-op when it finished; frees the slot when the client went away
            c.leave();
          });
    };
  };
  h.Post("/v1/chat/completions", completion(true));
  h.Post("/v1/completions", completion(false));
  h.Post("/chat/completions", completion(true)); // clients configured with a base URL without /v1
  h.Post("/completions", completion(false));

  h.Get("/v1/models", [this, &c](const httplib::Request &, httplib::Response &res) {
    res.set_content(dumpJson(api_.models(c.started)), "application/json");
  });
  h.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    const SchedulerStats s = sched_.stats();
    res.status = s.draining ? 503 : 200;
    res.set_content(dumpJson(json{{"status", s.draining ? "draining" : "ok"},
                                  {"slots_idle", s.slotsTotal - s.slotsBusy},
                                  {"slots_processing", s.slotsBusy}}),
                    "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
    if (!opts_.metrics) // off by default, as in llama-server
      return sendError(res, ApiError{501, "this server does not serve /metrics (start it with --metrics)",
                                     "not_supported_error", "", ""});
    res.set_content(metricsText() + llamaMetricsText(sched_.stats(), sched_.slotStates(), api_.ctxSize()),
                    "text/plain; version=0.0.4");
  });
  h.Post("/tokenize", [this](const httplib::Request &req, httplib::Response &res) {
    json out;
    if (auto e = api_.tokenize(req.body, out))
      return sendError(res, *e);
    res.set_content(dumpJson(out), "application/json");
  });
  h.Post("/detokenize", [this](const httplib::Request &req, httplib::Response &res) {
    json out;
    if (auto e = api_.detokenize(req.body, out))
      return sendError(res, *e);
    res.set_content(dumpJson(out), "application/json");
  });
  addDropInRoutes(h, ctx); // llama-server's own routes, the Anthropic and Responses APIs
  h.Get("/", [this](const httplib::Request &, httplib::Response &res) {
    if (!opts_.webui)
      return sendError(res,
                       ApiError{404, "the chat page is off (--no-webui)", "invalid_request_error", "", ""});
    res.set_header("Cache-Control", "no-cache");
    res.set_content(chatPage(), "text/html; charset=utf-8");
  });
}

std::string Server::metricsText() const {
  const SchedulerStats s = sched_.stats();
  std::string out;
  auto metric = [&out](const char *name, const char *type, const char *help, const std::string &samples) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", name, help, name, type, samples);
  };
  std::string reqs;
  {
    std::lock_guard<std::mutex> lock(counters_->mu);
    for (const auto &[key, n] : counters_->requests)
      reqs += fmt::format("tpc_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
    metric("tpc_requests_in_flight", "gauge", "Completion requests being answered.",
           fmt::format("tpc_requests_in_flight {}\n", counters_->inFlight));
  }
  metric("tpc_requests_total", "counter", "HTTP requests answered, by endpoint and status.", reqs);
  std::string fin;
  for (int r = 0; r < 4; ++r)
    fin += fmt::format("tpc_requests_finished_total{{reason=\"{}\"}} {}\n", finishReasonName(FinishReason(r)),
                       s.finished[r]);
  metric("tpc_requests_finished_total", "counter", "Generations finished, by reason.", fin);
  // Unlabelled metrics: one sample each.
  struct One {
    const char *name, *type, *help;
    double value;
  } const ones[] = {
      {"tpc_prompt_tokens_total", "counter", "Prompt tokens evaluated.", double(s.promptTokens)},
      {"tpc_generated_tokens_total", "counter", "Tokens generated and sent.", double(s.generatedTokens)},
      {"tpc_steps_total", "counter", "Engine evaluations (one batch each).", double(s.steps)},
      {"tpc_batch_tokens_total", "counter", "Tokens in all batches.", double(s.batchTokens)},
      {"tpc_slots_total", "gauge", "Parallel sequences (-np).", double(s.slotsTotal)},
      {"tpc_slots_busy", "gauge", "Slots holding a request.", double(s.slotsBusy)},
      {"tpc_requests_queued", "gauge", "Requests waiting for a slot.", double(s.queued)},
      {"tpc_decode_tokens_per_second", "gauge", "Generated tokens per second of evaluation, last ~10 s.",
       s.decodeTokensPerSecond},
      {"tpc_prompt_tokens_per_second", "gauge", "Prompt tokens per second of evaluation, last ~10 s.",
       s.promptTokensPerSecond},
      {"tpc_engine_seconds_total", "counter", "Scheduler thread time inside engine evaluations.",
       s.engineSeconds},
      {"tpc_host_seconds_total", "counter",
       "Scheduler thread time around evaluations (batching, sampling, detokenizing, events).", s.hostSeconds},
      {"tpc_idle_seconds_total", "counter", "Scheduler thread time waiting for work.", s.idleSeconds},
      {"tpc_decode_steps_total", "counter", "Steps with at least one decode token.", double(s.decodeSteps)},
      {"tpc_decode_entries_total", "counter", "Decode tokens in all steps (/ decode steps: slots per step).",
       double(s.decodeEntries)},
      {"tpc_pure_decode_steps_total", "counter", "Steps of decode tokens only (no prompt chunk).",
       double(s.pureDecodeSteps)},
      {"tpc_pure_decode_entries_total", "counter", "Decode tokens in the pure decode steps.",
       double(s.pureDecodeEntries)},
      {"tpc_pure_decode_engine_seconds_total", "counter", "Engine time of the pure decode steps.",
       s.pureDecodeEngineSeconds},
      {"tpc_grammar_tokens_total", "counter", "Tokens sampled under a grammar (structured output).",
       double(s.grammarTokens)},
      {"tpc_grammar_masks_total", "counter", "Token masks computed (the sampled token was refused; finished requests).",
       double(s.grammarMasks)},
      {"tpc_grammar_mask_seconds_total", "counter", "Time computing token masks (finished requests).",
       s.grammarMaskSeconds}};
  for (const One &m : ones)
    metric(m.name, m.type, m.help, fmt::format("{} {}\n", m.name, m.value));
  return out;
}

} // namespace tpc::server
