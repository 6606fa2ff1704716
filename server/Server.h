//===- Server.h - the OpenAI-compatible HTTP server ---------------*- C++ -*-===//
//
// Routes (cpp-httplib, one thread per connection from a fixed pool):
//   POST /v1/chat/completions, /v1/completions   OpenAI shapes, streamed as server-sent events or not
//   GET  /v1/models, /health, /metrics (Prometheus text; --metrics), /   (the chat page, no external assets)
//   POST /tokenize, /detokenize                   llama-server's shapes
//   llama-server's /completion, /props, /slots, /apply-template, /models, Anthropic's /v1/messages and
//   OpenAI's /v1/responses: server/DropInRoutes.h
// With an API key every route but /health and the static page at / needs "Authorization: Bearer KEY" or
// "x-api-key: KEY" (the page asks for the key and sends it with its API calls). Browser pages on other
// origins: server/Cors.h, checked before the key. Bodies larger than maxBodyBytes get 413;
// every error is OpenAI's {"error": {...}} object.
//
// A streaming response waits for the request's events with a short timeout and writes an SSE comment
// (": keep-alive") when none came, so a client that went away is noticed within a heartbeat or two even
// while its prompt is still being read, and its request is cancelled (the slot is freed at the next
// step). A slow reader only blocks its own connection thread: the scheduler queues events without
// waiting (cpp-httplib's write timeout, 5 s, then ends that stream).
//
// shutdown() (SIGTERM): new completions get 503, running ones finish and their streams complete, then the
// listener stops.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_SERVER_H
#define TPC_SERVER_SERVER_H

#include "server/Api.h"
#include "server/Cors.h"
#include "server/Scheduler.h"

#include <chrono>
#include <map>
#include <memory>

namespace httplib {
class Server;
}

namespace tpc::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            ///< 0: any free port (bind() returns it)
  std::string apiKey;         ///< empty: no authentication
  size_t maxBodyBytes = 8u << 20;
  int httpThreads = 64;       ///< connection threads (each open connection holds one)
  std::chrono::milliseconds heartbeat{250};
  std::chrono::seconds drainTimeout{60}; ///< how long shutdown() waits for running streams
  CorsPolicy cors;            ///< origins browser pages may call from (server/Cors.h)
  bool metrics = false;       ///< serve /metrics (llama-server's --metrics)
  bool slots = true;          ///< serve /slots (llama-server's --no-slots turns it off)
  bool webui = true;          ///< serve the chat page at / (--no-webui)
  std::string modelPath;      ///< what /props shows as the model
  std::chrono::seconds ioTimeout{0}; ///< HTTP read/write timeout (--timeout); 0: cpp-httplib's (5 s)
};

/// The HTTP front of a Scheduler (see the file comment).
class Server {
public:
  Server(Scheduler &sched, const Api &api, ServerOptions opts);
  ~Server();

  /// Binds the listening socket; returns the port, or an error naming --host/--port.
  Expected<int> bind();
  /// Serves until shutdown() completes (blocking).
  void serve();
  /// Drains and stops (see the file comment); any thread.
  void shutdown();

private:
  void routes();
  std::string metricsText() const;
  struct Counters;

  Scheduler &sched_;
  const Api &api_;
  ServerOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Counters> counters_;
};

} // namespace tpc::server

#endif // TPC_SERVER_SERVER_H
