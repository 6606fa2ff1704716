//===- ServeCommand.cpp - `tpc serve` ---------------------------------------===//
//
// `tpc serve plan.bin|model.gguf [--host 127.0.0.1] [--port 8080] [-np 4] [-c CTX] [--api-key KEY]
// [--chat-template NAME|FILE]` loads a plan (or compiles a GGUF in memory with the flags of `tpc compile`,
// ModelSource.h), opens one engine with -np sequences (server/BatchedEngine.h: one session whose KV caches
// hold every slot, one evaluation per step for all slots), and serves the OpenAI-compatible API
// (server/Server.h) until SIGTERM or SIGINT, which drain the running requests; a second signal exits at
// once. Once listening it prints "tpc serve: listening on http://HOST:PORT" on stderr (with --port 0 the
// port is any free one, which tests use). -c is the KV context of all slots together, as llama-server's:
// each slot holds -c / -np positions (without -c, the plan's default context is divided the same way).
//
// The chat template comes from --chat-template (a built-in renderer's name or a Jinja file) or is the plan's
// GGUF template, rendered by the Jinja interpreter (server/jinja); a template that cannot be parsed or
// rendered on a probe conversation is refused here, naming its line and construct and the flag. A plan
// without any template gets its architecture's built-in one, else ChatML (server/TemplateFallback.h), said
// at start-up. llama-server's flag spellings: ServeFlags.h.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"
#include "tools/tpc/ModelSource.h"
#include "tools/tpc/ServeFlags.h"

#include "runtime/tokenizer/PlanVocab.h"
#include "server/Scheduler.h"
#include "server/Server.h"
#include "server/BatchedEngine.h"
#include "server/TemplateFallback.h"

#include <fmt/core.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <pthread.h>
#include <thread>

namespace {

using tpc::cli::Failure;
using namespace tpc;

struct ServeOptions {
  std::string plan;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int64_t ctxSize = 0;
  std::string apiKey;
  std::string chatTemplate;
  std::string gguf;
  int threads = 0;
  std::string backend = "cpu";
  int batchSize = 256;
  int gatherMs = 20;
  int httpThreads = 64;
  size_t maxBodyBytes = 8u << 20;
  std::string reasoningFormat = "auto";
  cli::CompileFlags compile; ///< for a GGUF: how to compile it (ModelSource.h)
  cli::LlamaServerFlags llama; ///< llama-server's spellings (ServeFlags.h)
};

/// The id clients name in "model": --alias, else the GGUF's file name without ".gguf".
std::string modelId(const ServeOptions &o, const rt::Plan &plan) {
  if (!o.llama.aliases.empty())
    return o.llama.aliases.front();
  std::string name = plan.ggufPath.substr(plan.ggufPath.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0)
    name.resize(name.size() - 5);
  return name.empty() ? "tpc" : name;
}

void runServe(ServeOptions o) {
  // Every thread started from here on (sessions, scheduler, HTTP pool) inherits this mask, so only the
  // watcher below receives SIGTERM/SIGINT.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN); // a client that went away is a failed write, not a dead server

  if (o.parallel < 1 || o.parallel > 256)
    throw Failure(fmt::format("-np: {} slots is not in 1..256", o.parallel));
  if (o.ctxSize < 0)
    throw Failure("-c: the context size must be > 0 (or omitted for the plan's default)");
  if (o.port < 0 || o.port > 65535)
    throw Failure(fmt::format("--port: {} is not in 0..65535", o.port));
  if (o.batchSize < 1)
    throw Failure("-b: the batch size must be >= 1");
  if (o.gatherMs < 0 || o.gatherMs > 10000)
    throw Failure(fmt::format("--gather-ms: {} is not in 0..10000", o.gatherMs));
  if (o.threads < 0)
    throw Failure("-t: threads must be >= 0");
  if (o.httpThreads < 2)
    throw Failure("--threads-http: give at least 2");
  if (o.apiKey.empty())
    if (const char *k = std::getenv("TPC_API_KEY"))
      o.apiKey = k;
  if (o.plan.empty())
    o.plan = o.llama.model;
  if (o.plan.empty())
    throw Failure("no model: give a plan or GGUF (positional, or -m as llama-server)");
  server::ServerOptions so2;
  server::ServerDefaults defaults;
  cli::applyLlamaServerFlags(o.llama, o.apiKey, so2, defaults);

  rt::Plan plan = cli::loadModel(o.plan, o.compile, o.gguf, nullptr);
  // The sessions never read the vocabulary: out of the plan before -np sessions each copy it.
  rt::PlanTokenizer vocab = std::move(plan.tokenizer);
  const std::string planTemplate = vocab.chatTemplate;
  const std::string planToolUseTemplate = vocab.chatTemplateToolUse;
  if (vocab.tokens.empty())
    throw Failure(fmt::format("plan '{}' has no tokenizer; tpc serve needs one (recompile from a GGUF with "
                              "tokenizer.ggml.*)",
                              o.plan));
  std::unique_ptr<rt::Tokenizer> tok;
  try {
    tok = std::make_unique<rt::Tokenizer>(rt::tokenizerDataFromPlan(std::move(vocab)));
  } catch (const std::exception &e) {
    throw Failure(fmt::format("plan '{}': tokenizer: {}", o.plan, e.what()));
  }

  std::optional<server::ChatTemplate> tmpl;
  std::string noTemplate;
  // bos_token and eos_token of the template: the vocabulary's texts of those tokens.
  const rt::TokenizerData &td = tok->data();
  const std::string bos = td.bos >= 0 ? tok->tokenToPiece(td.bos, true) : std::string();
  const std::string eos = td.eos >= 0 ? tok->tokenToPiece(td.eos, true) : std::string();
  if (!o.chatTemplate.empty()) {
    auto t = server::ChatTemplate::fromFlag(o.chatTemplate, bos, eos);
    if (!t)
      throw Failure(t.message());
    tmpl = *t;
  } else {
    auto t = server::ChatTemplate::fromJinja(planTemplate, fmt::format("plan '{}'", o.plan), bos, eos,
                                             planToolUseTemplate);
    if (t)
      tmpl = *t;
    else if (!planTemplate.empty())
      throw Failure(t.message());
    else
      noTemplate = t.message();
  }
  std::string templateWhy;
  if (!tmpl && noTemplate.size()) { // no template in the GGUF: the architecture's, else ChatML
    const server::TemplateFallback fb = server::templateFallback(plan.model.arch);
    auto t = server::ChatTemplate::fromFlag(fb.name, bos, eos);
    if (t) {
      tmpl = *t;
      templateWhy = fb.why;
    }
  }

  // llama-server's -c: the context of all slots together, -c / -np positions each.
  const int64_t total = o.ctxSize > 0 ? o.ctxSize : plan.model.defaultCtx;
  if (total / o.parallel < 1)
    throw Failure(fmt::format("-c {} is the context of all {} slots together (-c / -np positions each, as "
                              "llama-server); give at least {}",
                              total, o.parallel, o.parallel));
  if (o.batchSize > plan.model.maxBatch)
    fmt::print(stderr, "tpc serve: -b {} exceeds the plan's max batch {}; steps run in chunks of {}\n",
               o.batchSize, plan.model.maxBatch, plan.model.maxBatch);
  rt::SessionOptions so;
  so.threads = o.threads;
  so.ctxSize = total / o.parallel;
  so.commDtype = cli::commDtypeOverride(o.compile);
  so.ggufPath = o.gguf;
  so.progress = true; // loading the weights (Progress.h: where it takes over a second)
  auto engine = server::BatchedEngine::open(plan, o.parallel, so, o.backend);
  if (!engine)
    throw Failure(engine.message());

  server::Scheduler::Options schedOpts;
  schedOpts.batchSize = o.batchSize;
  schedOpts.gather = std::chrono::milliseconds(o.gatherMs);
  server::Scheduler sched(**engine, *tok, schedOpts);
  server::Api api(*tok, tmpl, noTemplate, modelId(o, plan), (*engine)->ctxSize(), (*engine)->nVocab());
  server::ReasoningFormat reasoning;
  if (!server::parseReasoningFormat(o.reasoningFormat, reasoning))
    throw Failure("--reasoning-format: '" + o.reasoningFormat + "' is not none, deepseek, deepseek-legacy or auto");
  api.setReasoningFormat(reasoning);
  api.setDefaults(defaults);
  api.setSlots(o.parallel);
  if (o.llama.aliases.size() > 1)
    api.setAliases({o.llama.aliases.begin() + 1, o.llama.aliases.end()});
  so2.modelPath = o.plan;
  if (o.llama.timeout > 0)
    so2.ioTimeout = std::chrono::seconds(o.llama.timeout);
  so2.host = o.host;
  so2.port = o.port;
  so2.apiKey = o.apiKey;
  so2.maxBodyBytes = o.maxBodyBytes;
  so2.httpThreads = o.httpThreads;
  server::Server http(sched, api, so2);
  auto port = http.bind();
  if (!port)
    throw Failure(port.message());
  sched.start();

  std::atomic<bool> finished{false};
  std::thread shutdownThread;
  std::thread watcher([&] {
    int received = 0;
    const timespec poll = {0, 200 * 1000 * 1000};
    while (!finished.load()) {
      const int sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig < 0)
        continue;
      if (++received > 1) {
        fmt::print(stderr, "tpc serve: second signal, exiting now\n");
        std::_Exit(130);
      }
      fmt::print(stderr, "tpc serve: {} received, finishing the running requests\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      shutdownThread = std::thread([&] { http.shutdown(); });
    }
  });

  fmt::print(stderr, "tpc serve: {} slot(s) x {} tokens of context in one {} session, chat template {}\n",
             o.parallel, (*engine)->ctxSize(), (*engine)->session().backendName(),
             tmpl ? tmpl->name() : std::string("none (chat requests need --chat-template)"));
  if (tmpl)
    fmt::print(stderr, "tpc serve: {}\n", api.outputSummary());
  if (const std::string k = (*engine)->session().kernelChoice(); !k.empty())
    fmt::print(stderr, "tpc serve: kernels {}\n", k); // the CPU level and why (runtime/cpu/KernelChoice.h)
  if (!templateWhy.empty())
    fmt::print(stderr, "tpc serve: chat template {}: {}\n", tmpl->name(), templateWhy);
  if ((*engine)->session().recomputesRewinds())
    fmt::print(stderr, "tpc serve: prompt cache: the plan has recurrent layers, so a request reuses a slot's "
                       "sequence only when all of it is a prefix of its prompt\n");
  fmt::print(stderr, "tpc serve: listening on http://{}:{}\n", o.host, *port);
  std::fflush(stderr);
  http.serve();
  finished = true;
  watcher.join();
  if (shutdownThread.joinable())
    shutdownThread.join();
  fmt::print(stderr, "tpc serve: stopped\n");
}

void registerServe(CLI::App &app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App *cmd = app.add_subcommand("serve", "Serve a plan over an OpenAI-compatible HTTP API");
  cmd->add_option("model", o->plan,
                  "plan file written by `tpc compile`, or a GGUF model (compiled in memory with the flags "
                  "below; also -m)");
  cmd->allow_extras(); // refused in the callback, naming llama-server's flags tpc serve does not take
  cli::addCompileFlags(*cmd, o->compile);
  cmd->add_option("--host", o->host, "address to listen on (default: loopback only)")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "slots: sequences served at once (also -np)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->ctxSize,
                  "KV context of all slots together in tokens, -c / -np per slot as in llama-server (default: "
                  "the plan's)");
  cmd->add_option("--api-key", o->apiKey, "require 'Authorization: Bearer KEY' (also $TPC_API_KEY)");
  cmd->add_option("--chat-template", o->chatTemplate,
                  "llama3, llama3.1, chatml, qwen3, gemma3, gemma4 (built-in renderers) or a Jinja template file "
                  "(default: the GGUF's tokenizer.chat_template, rendered by the Jinja interpreter)");
  cmd->add_option("--gguf", o->gguf, "the GGUF the plan was compiled from, if it moved");
  cmd->add_option("-t,--threads", o->threads, "CPU threads of the session (0 = all cores)");
  cmd->add_option("--backend", o->backend, "cpu, cuda or auto (the first usable of cuda, cpu)")
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", o->batchSize, "tokens per evaluation step at most (decode + prompt chunks)")
      ->capture_default_str();
  cmd->add_option("--gather-ms", o->gatherMs,
                  "when requests that finished together left every slot free, wait up to this long for their "
                  "clients' next requests so their prompts are read in one step (0: never)")
      ->capture_default_str();
  cmd->add_option("--threads-http", o->httpThreads, "HTTP connection threads")->capture_default_str();
  cmd->add_option("--max-body-bytes", o->maxBodyBytes, "largest request body accepted")->capture_default_str();
  cmd->add_option("--reasoning-format", o->reasoningFormat,
                  "none: reasoning stays in content; deepseek or auto: returned as reasoning_content")
      ->check(CLI::IsMember({"none", "deepseek", "deepseek-legacy", "auto"}))
      ->capture_default_str();
  cli::addLlamaServerFlags(*cmd, o->llama);
  cmd->callback([o, cmd] {
    cli::refuseExtraArguments(cmd->remaining());
    runServe(*o);
  });
}

} // namespace

TPC_REGISTER_COMMAND(25, registerServe);
