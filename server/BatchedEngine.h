//===- BatchedEngine.h - the Engine on one multi-sequence session -*- C++ -*-===//
//
// Every slot of `tpc serve` is a sequence of one rt::Session (runtime/exec/Session.h) opened with
// SessionOptions::sequences = -np: one copy of the weights, one set of KV caches holding every slot's
// positions (sliding-window layers as rings), and one evaluate() per scheduler step for all of the
// step's tokens, so the slots' decode tokens share each read of the weights. The session computes the
// logits rows of the entries that ask for them only. step() and forget() forward to evaluate() and
// clearSequence(); the session checks the batch (Engine.h's contract; it also accepts the rewinds its
// caches allow) and its errors come back as they are.
//
// Usage:
//   auto e = BatchedEngine::open(plan, 4, sessionOptions, "cpu");   // 4 slots
//   std::vector<float> rows;
//   auto ok = (*e)->step({{tok, pos, seq, true}, ...}, rows);
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_BATCHEDENGINE_H
#define TPC_SERVER_BATCHEDENGINE_H

#include "server/Engine.h"

#include "runtime/exec/Executor.h"

#include <memory>

namespace tpc::server {

/// An Engine over one session (see the file comment).
class BatchedEngine : public Engine {
public:
  explicit BatchedEngine(std::unique_ptr<rt::Session> session) : s_(std::move(session)) {}

  /// Opens `plan` on `backend` ("cpu", "cuda", "auto") with `nSeq` sequences of opts.ctxSize positions
  /// each (opts.sequences is set here); errors are one line.
  static Expected<std::unique_ptr<BatchedEngine>> open(const rt::Plan &plan, int32_t nSeq,
                                                       rt::SessionOptions opts, const std::string &backend);

  Expected<void> step(const std::vector<BatchEntry> &batch, std::vector<float> &rows) override;
  void forget(int32_t seq) override { s_->clearSequence(seq); }
  /// What the session's caches still hold (a rewind it accepts); a recurrent state only continues.
  bool canKeepPrefix(int32_t seq, int32_t n) const override;
  /// Nothing to do: the session drops the positions from n on when the next batch starts there.
  void keepPrefix(int32_t, int32_t) override {}
  int32_t maxSequences() const override { return s_->maxSequences(); }
  int64_t ctxSize() const override { return s_->ctxSize(); }
  int64_t nVocab() const override { return s_->nVocab(); }

  const rt::Session &session() const { return *s_; }

private:
  std::unique_ptr<rt::Session> s_;
  std::vector<rt::BatchToken> batch_; ///< reused between steps
};

} // namespace tpc::server

#endif // TPC_SERVER_BATCHEDENGINE_H
