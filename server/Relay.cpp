//===- Relay.cpp - running a parsed request and answering it ---------------===//
#include "server/Relay.h"

#include <fmt/core.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <random>

namespace tpc::server {

using json = nlohmann::json;

void sendError(httplib::Response &res, const ApiError &e) {
  res.status = e.status;
  res.set_content(errorBody(e), "application/json");
}

std::string newId(const char *prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}-{:016x}", prefix, (salt << 20) ^ ++counter);
}

std::string sse(const json &j) { return "data: " + dumpJson(j) + "\n\n"; }

std::string sseEvent(const std::string &name, const json &j) {
  return "event: " + name + "\ndata: " + dumpJson(j) + "\n\n";
}

std::optional<ApiError> submitChoices(Scheduler &sched, const CompletionRequest &cr,
                                      std::vector<std::shared_ptr<Request>> &out) {
  out.clear();
  for (int32_t i = 0; i < cr.n; ++i) {
    GenerationParams g = cr.gen;
    g.sampling.seed += static_cast<uint64_t>(i);
    // Choices of one request must not share a slot's cache with each other's id_slot wish.
    if (i > 0)
      g.idSlot = -1;
    auto submitted = sched.submit(cr.prompt, std::move(g));
    if (!submitted) {
      for (auto &r : out)
        r->cancel();
      out.clear();
      const bool draining = sched.stats().draining;
      return ApiError{draining ? 503 : 400, submitted.message(),
                      draining ? "server_error" : "invalid_request_error", "", ""};
    }
    out.push_back(submitted.take());
  }
  return std::nullopt;
}

void collectResult(Request &req, CompletionResult &r) {
  for (Event e;;) {
    if (!req.next(e, std::chrono::milliseconds(1000)))
      continue;
    if (e.kind == Event::Kind::Token) {
      r.text += e.token.text;
      r.tokens.push_back(std::move(e.token));
      continue;
    }
    r.text += e.finish.trailingText;
    r.finish = std::move(e.finish);
    return;
  }
}

std::optional<ApiError> collectChoices(const std::vector<std::shared_ptr<Request>> &reqs,
                                       std::vector<CompletionResult> &out) {
  out.assign(reqs.size(), CompletionResult{});
  std::optional<ApiError> err;
  for (size_t i = 0; i < reqs.size(); ++i) {
    CompletionResult &r = out[i];
    collectResult(*reqs[i], r);
    if (!err && (r.finish.reason == FinishReason::Error || r.finish.reason == FinishReason::Cancelled))
      err = ApiError{500, r.finish.error.empty() ? "the request was cancelled" : r.finish.error,
                     "server_error", "", ""};
  }
  return err;
}

namespace {
struct StreamState {
  std::vector<std::shared_ptr<Request>> reqs;
  std::vector<bool> finished;
  std::shared_ptr<StreamWriter> w;
  bool started = false, done = false;
  size_t next = 0; ///< the choice polled first (round robin)
};

/// Hands one event of choice `i` to the writer; an error ends the whole stream.
void onEvent(StreamState &st, size_t i, const Event &e, std::string &out) {
  if (e.kind == Event::Kind::Token) {
    st.w->token(i, e.token, out);
    return;
  }
  st.finished[i] = true;
  if (e.finish.reason == FinishReason::Error || e.finish.reason == FinishReason::Cancelled) {
    st.w->error(e.finish.error.empty() ? "cancelled" : e.finish.error, out);
    for (auto &r : st.reqs)
      r->cancel();
    st.done = true;
    return;
  }
  st.w->finish(i, e.finish, out);
  if (std::all_of(st.finished.begin(), st.finished.end(), [](bool f) { return f; })) {
    st.w->end(out);
    st.done = true;
  }
}
} // namespace

void streamChoices(const RouteContext &ctx, httplib::Response &res,
                   std::vector<std::shared_ptr<Request>> reqs, std::shared_ptr<StreamWriter> w) {
  auto st = std::make_shared<StreamState>();
  st->finished.assign(reqs.size(), false);
  st->reqs = std::move(reqs);
  st->w = std::move(w);
  const auto heartbeat = ctx.opts.heartbeat;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, heartbeat](size_t, httplib::DataSink &sink) {
        if (st->done) {
          sink.done();
          return true;
        }
        std::string out;
        if (!st->started) {
          st->w->start(out);
          st->started = true;
        }
        const size_t n = st->reqs.size();
        bool any = false;
        Event e;
        // Everything already queued goes out in one write, the choices in turn.
        for (size_t k = 0; k < n && !st->done; ++k) {
          const size_t i = (st->next + k) % n;
          while (!st->done && !st->finished[i] && st->reqs[i]->next(e, std::chrono::milliseconds(0))) {
            any = true;
            onEvent(*st, i, e, out);
          }
        }
        st->next = (st->next + 1) % n;
        if (!any && !st->done) {
          // Nothing queued: wait on the first open choice for up to a heartbeat, else keep the line alive.
          const size_t i = static_cast<size_t>(std::find(st->finished.begin(), st->finished.end(), false) -
                                               st->finished.begin());
          if (st->reqs[i]->next(e, heartbeat))
            onEvent(*st, i, e, out);
          else
            out += ": keep-alive\n\n";
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          for (auto &r : st->reqs)
            r->cancel();
          return false;
        }
        if (st->done)
          sink.done();
        return true;
      },
      [st, leave = ctx.leave](bool) {
        for (auto &r : st->reqs)
          r->cancel(); // no-op when finished; frees the slots when the client went away
        leave();
      });
}

} // namespace tpc::server
