//===- SessionEngine.h - the Engine on today's runtime sessions ---*- C++ -*-===//
//
// The runtime's Session holds one sequence: one KV cache indexed by position. Until sessions learn
// sequences (see Engine.h for what the batched engine needs), this engine keeps one Session per slot, each
// with its own weights, activations and KV cache, and runs a step as one evaluate() call per sequence
// present in the batch, in batch order, with that sequence's tokens and positions. That is correct (a
// token sees only its own sequence's cache) but not faster than serving the slots one after another:
// every sequence reads the weights once per step, and memory grows with the slot count.
//
// forget() needs no work here: a slot restarts at position 0 and attention reads positions 0..pos only,
// so the stale cache entries past the new length are overwritten before they are read.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_SESSIONENGINE_H
#define TPC_SERVER_SESSIONENGINE_H

#include "server/Engine.h"

#include "runtime/exec/Executor.h"

#include <functional>
#include <memory>

namespace tpc::server {

/// One sequence's model: evaluates tokens at positions and returns one logits row per token.
using EvaluateFn = std::function<Expected<std::vector<float>>(const std::vector<int32_t> &tokens,
                                                              const std::vector<int32_t> &positions)>;

/// An Engine with one independent evaluator per sequence (see the file comment).
class SessionEngine : public Engine {
public:
  /// `perSequence[s]` evaluates sequence s; every one has the same context and vocabulary.
  SessionEngine(std::vector<EvaluateFn> perSequence, int64_t ctxSize, int64_t nVocab);

  /// Opens `nSeq` CPU sessions of `plan` (each a full copy of the weights); errors are one line.
  static Expected<std::unique_ptr<SessionEngine>> openCpu(const rt::Plan &plan, int32_t nSeq,
                                                          const rt::SessionOptions &opts);

  Expected<std::vector<float>> step(const std::vector<BatchEntry> &batch) override;
  void forget(int32_t seq) override;
  int32_t maxSequences() const override { return static_cast<int32_t>(seqs_.size()); }
  int64_t ctxSize() const override { return ctx_; }
  int64_t nVocab() const override { return vocab_; }

private:
  std::vector<EvaluateFn> seqs_;
  std::vector<int64_t> lengths_;
  int64_t ctx_, vocab_;
  std::vector<std::shared_ptr<rt::Session>> owned_;
};

} // namespace tpc::server

#endif // TPC_SERVER_SESSIONENGINE_H
