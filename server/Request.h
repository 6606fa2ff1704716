//===- Request.h - one generation request and what it streams back -*- C++ -*-===//
//
// A Request is shared by the HTTP thread that answers it and the scheduler thread that runs it. The
// scheduler pushes Events (one per generated token, then one Finish); the HTTP thread pops them with a
// timeout (so it can notice a client that went away) and may cancel() at any time, which frees the slot
// at the scheduler's next step. Events queue without bound, so a slow reader never blocks the scheduler;
// max_tokens bounds the queue.
//
// TextStream turns token ids into the text a client sees: complete UTF-8 characters only, and text that
// could be the start of a stop string held back until it is known not to be one (a stop string is cut
// off and ends the generation, as in OpenAI's API).
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_REQUEST_H
#define TPC_SERVER_REQUEST_H

#include "runtime/sampler/Sampler.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tpc::server {

namespace grammar {
struct Grammar;
}

/// Sampling and stopping settings of one request (already validated by the API layer).
struct GenerationParams {
  rt::SamplerParams sampling;
  int32_t maxTokens = 16;        ///< tokens to generate at most (>= 1)
  std::vector<std::string> stop; ///< stop strings (not part of the output)
  bool logprobs = false;         ///< report each chosen token's log-probability
  int32_t topLogprobs = 0;       ///< and this many most likely alternatives
  bool ignoreEos = false;        ///< keep going after an end-of-generation token
  std::vector<int32_t> stopTokens; ///< ids that end generation like EOG (the chat template's end of turn)
  /// GBNF text that constrains the output (response_format, json_schema, grammar, a forced tool call:
  /// ToolCalls.h forcedCall); empty: none. `grammar` is its compiled form (ApiGrammar.h compiles it once,
  /// when the request is parsed).
  std::string gbnf;
  std::shared_ptr<const grammar::Grammar> grammar;
  /// Control tokens are released as their text (harmony's <|channel|>, [TOOL_CALLS]...): the chat answer
  /// goes through an OutputParser that reads the markers and never shows them.
  bool specialText = false;
  /// Prompt caching (llama-server's cache_prompt): the request may reuse the longest prefix its slot's
  /// sequence shares with the prompt, and leaves its sequence in the slot for the next one
  /// (server/PromptCache.h). Off: the slot's sequence is dropped before and after.
  bool cachePrompt = false;
  int32_t idSlot = -1; ///< run in this slot (llama-server's id_slot; it waits for it); -1: any
};

/// One token and its log-probabilities (log-softmax of the raw logits).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

/// One generated token as the client sees it.
struct TokenOut {
  int32_t id = 0;
  std::string text; ///< text released with this token (may be empty: held back, see the file comment)
  float logprob = 0;
  std::vector<TokenLogprob> top; ///< best first (empty unless asked)
};

enum class FinishReason { Stop, Length, Cancelled, Error };
/// OpenAI's finish_reason spelling ("stop", "length"; "cancelled" and "error" never reach a client).
const char *finishReasonName(FinishReason r);

/// The end of a request: why, and its counts and timings.
struct Finish {
  FinishReason reason = FinishReason::Stop;
  std::string error;        ///< for Error: one line
  std::string trailingText; ///< text released at the end (held-back characters), may be empty
  int32_t promptTokens = 0;
  int32_t completionTokens = 0;
  int32_t cachedTokens = 0;   ///< prompt tokens reused from the slot's previous sequence (not evaluated)
  int32_t slot = -1;          ///< the slot that ran the request
  bool stoppedByWord = false; ///< Stop because a stop string appeared (else an end-of-generation token)
  double queuedMs = 0;  ///< submit -> slot
  double promptMs = 0;  ///< slot -> first token sampled
  double decodeMs = 0;  ///< first token -> finish
};

/// What a request receives, in order: Token events, then exactly one Finish.
struct Event {
  enum class Kind { Token, Finish } kind = Kind::Token;
  TokenOut token;
  Finish finish;
};

/// Shared state of one request (see the file comment).
class Request {
public:
  using Clock = std::chrono::steady_clock;
  Request(std::vector<int32_t> prompt, GenerationParams params, std::function<void()> wake)
      : prompt(std::move(prompt)), params(std::move(params)), submitted(Clock::now()), wake_(std::move(wake)) {}

  const std::vector<int32_t> prompt;
  const GenerationParams params;
  const Clock::time_point submitted;

  /// Waits up to `timeout` for the next event; false when none came.
  bool next(Event &e, std::chrono::milliseconds timeout);
  /// Stops the request; the scheduler frees its slot at its next step and sends a Cancelled finish.
  void cancel();
  bool cancelled() const { return cancelled_.load(); }

  /// Scheduler side: appends an event and wakes the reader.
  void push(Event e);

private:
  std::atomic<bool> cancelled_{false};
  std::function<void()> wake_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

/// Token ids -> client text, with stop strings (see the file comment).
class TextStream {
public:
  TextStream(const rt::Tokenizer &tok, std::vector<std::string> stop, bool special = false)
      : decoder_(tok, /*continuation=*/true, special), stop_(std::move(stop)) {}
  /// Adds token `id`; returns the text that can be released now. Sets stopped() when a stop string
  /// appeared (the text before it is released, the rest dropped).
  std::string push(int32_t id);
  /// Releases whatever is held back (at the end of generation).
  std::string flush();
  bool stopped() const { return stopped_; }

private:
  rt::StreamDecoder decoder_;
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

/// log-softmax of `row` at `id`, and the `top` most likely tokens (best first, ties by lower id).
TokenLogprob logprobOf(const float *row, size_t n, int32_t id, int32_t top, std::vector<TokenLogprob> &best);

} // namespace tpc::server

#endif // TPC_SERVER_REQUEST_H
