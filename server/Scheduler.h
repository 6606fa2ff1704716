//===- Scheduler.h - slots and continuous batching over an Engine -*- C++ -*-===//
//
// The scheduler owns the Engine's sequences as slots. Requests wait in a FIFO queue until a slot is free;
// each step then builds one batch from
//   1. the next decode token of every generating slot (one entry each, logits asked), then
//   2. chunks of pending prompts, within a prompt budget of max(1, batchSize - decode entries) tokens,
//      split evenly over the slots still reading their prompt (the remainder to the first ones in a
//      rotating order, and what a short prompt leaves over to the others),
// so a long prompt is read over several steps while the other slots keep decoding. Only the last token
// of a prompt asks for logits. After the step each slot that got a row samples with its own Sampler
// (its own seed), and its token goes through EOG, stop strings, max_tokens and the context limit.
//
// A server whose slots all went free in one step (k requests finished together) waits up to
// Options::gather after the next request for k - 1 more before the step, so clients answered together
// have their next prompts read in one step; a lone client is never kept waiting.
//
// Slots and prompt caching: a queued request takes the free slot server/PromptCache.h picks (the longest
// prefix its prompt shares with a slot's kept sequence, or the slot it names with id_slot), and reads its
// prompt from the end of that prefix. A request with cachePrompt leaves its sequence (and its token ids)
// in the slot when it finishes; one without, or one that failed, has it forgotten.
//
// Cancellation (a client that went away) and new requests take effect at the start of the next step: a
// cancelled slot is freed and its sequence forgotten before the batch is built. drain() refuses new
// requests and lets the running ones finish (SIGTERM).
//
// Threading: start() runs the loop on its own thread; submit(), stats() and drain() may be called from
// any thread. Tests call runStep() directly instead of start(), which makes every step deterministic.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_SCHEDULER_H
#define TPC_SERVER_SCHEDULER_H

#include "server/Engine.h"
#include "server/Request.h"

#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace tpc::server {

namespace grammar {
class Vocabulary;
}

/// Counters for /metrics and /health.
struct SchedulerStats {
  int32_t slotsTotal = 0, slotsBusy = 0, queued = 0;
  uint64_t promptTokens = 0;    ///< prompt tokens evaluated
  uint64_t cachedTokens = 0;    ///< prompt tokens kept from a slot's previous sequence (not evaluated)
  double promptSeconds = 0, decodeSeconds = 0; ///< finished requests' prompt and decode times, summed
  uint64_t generatedTokens = 0; ///< tokens sampled and sent
  uint64_t steps = 0, batchTokens = 0;
  uint64_t finished[4] = {0, 0, 0, 0}; ///< by FinishReason
  double decodeTokensPerSecond = 0;    ///< generated tokens / wall time over the last ~10 s of steps
  double promptTokensPerSecond = 0;
  // Where the scheduler thread's time goes (seconds since start): inside engine.step(), in the host work
  // around it (admission, batch building, sampling, detokenizing, handing events over), and waiting for
  // work. decodeEntries / decodeSteps is how full the decode steps were; the pure decode steps (no prompt
  // token) and their engine time compare with `tpc run --bench --parallel`'s step.
  double engineSeconds = 0, hostSeconds = 0, idleSeconds = 0, pureDecodeEngineSeconds = 0;
  uint64_t decodeSteps = 0, decodeEntries = 0, pureDecodeSteps = 0, pureDecodeEntries = 0;
  bool draining = false;
  // Constrained generation (grammar/): tokens sampled under a grammar, masks computed (the sampled token
  // was refused) and their time; mask seconds / constrained tokens is the mask's cost per token.
  uint64_t grammarTokens = 0, grammarMasks = 0;
  double grammarMaskSeconds = 0;
};

/// One slot as GET /slots shows it.
struct SlotState {
  int32_t id = 0;
  bool busy = false;
  int32_t cachedPositions = 0; ///< positions its sequence holds (kept for the prompt cache when idle)
  GenerationParams params;     ///< the running request's (busy only)
  int32_t promptTokens = 0, promptDone = 0, generated = 0, cached = 0;
};

/// Where one batch entry came from (for tests and debugging).
struct BatchSource {
  int32_t slot = 0;
  bool prompt = false; ///< a prompt token (else a decode token)
};

/// Slots + continuous batching (see the file comment).
class Scheduler {
public:
  struct Options {
    int32_t batchSize = 256; ///< tokens per step at most, unless the decode tokens alone are more
    /// When every slot is free and k requests finished in the last step, how long the loop waits after
    /// the first new request for the other k - 1 (clients answered together come back together), so
    /// their prompts share one step instead of the first being read alone. 0: never wait.
    std::chrono::milliseconds gather{20};
  };
  Scheduler(Engine &engine, const rt::Tokenizer &tok, Options opts);
  ~Scheduler();

  /// Queues a generation; errors (one line) when draining, the prompt is empty or longer than the
  /// context, or a sampling parameter is out of range.
  Expected<std::shared_ptr<Request>> submit(std::vector<int32_t> prompt, GenerationParams params);

  /// Runs the loop on a thread of its own until the destructor.
  void start();
  /// One step: cancellations, slot assignment, one batch, sampling. Returns false when there was nothing
  /// to do. Not to be mixed with start().
  bool runStep();

  /// Refuses new requests from now on; in-flight ones run to the end.
  void drain();
  /// Blocks until no request is queued or running.
  void waitIdle();
  SchedulerStats stats() const;
  /// Every slot's state (GET /slots).
  std::vector<SlotState> slotStates() const;
  /// The last batch and where each entry came from.
  std::vector<BatchEntry> lastBatch() const;
  std::vector<BatchSource> lastSources() const;

private:
  struct Slot;
  bool hasWork() const;
  /// Waits (under `lock`) for the requests Options::gather expects; see the file comment.
  void gather(std::unique_lock<std::mutex> &lock);
  uint64_t finishedCount() const {
    return stats_.finished[0] + stats_.finished[1] + stats_.finished[2] + stats_.finished[3];
  }
  void admit();
  void buildBatch(std::vector<BatchEntry> &batch, std::vector<BatchSource> &src);
  void onToken(Slot &s, int32_t slotIndex, const float *row);
  void finish(Slot &s, int32_t slotIndex, FinishReason r, std::string error = {});
  /// The vocabulary's token bytes and trie for grammars, built by the first constrained request.
  const grammar::Vocabulary &vocabulary();
  void loop();

  Engine &engine_;
  const rt::Tokenizer &tok_;
  Options opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idleCv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<grammar::Vocabulary> vocab_;
  std::future<std::unique_ptr<grammar::Vocabulary>> vocabFuture_; ///< started by start()
  std::vector<float> rows_; ///< the engine's logits rows, reused every step (only the loop touches it)
  std::vector<BatchEntry> lastBatch_;
  std::vector<BatchSource> lastSources_;
  size_t rotate_ = 0;
  uint64_t admitted_ = 0;        ///< requests given a slot so far (Slot::lastUsed)
  int32_t finishedTogether_ = 0; ///< requests that finished in the last step that finished any (see gather)
  bool stop_ = false, draining_ = false;
  SchedulerStats stats_;
  struct Tick {
    double t;
    uint64_t gen, prompt;
  };
  std::deque<Tick> window_;
  std::thread thread_;
};

} // namespace tpc::server

#endif // TPC_SERVER_SCHEDULER_H
