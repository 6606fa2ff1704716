//===- Engine.h - what the server's scheduler needs from a model -*- C++ -*-===//
//
// The scheduler (Scheduler.h) drives a model through this interface only, so the HTTP server, batching
// and sampling do not depend on how the runtime holds sequences. One step() evaluates a batch that mixes
// sequences: every active slot's next decode token and chunks of pending prompts. Each entry carries its
// token, its position inside its own sequence and the sequence id; a token attends to the positions
// 0..pos of its own sequence only (earlier steps' tokens and the entries before it in the same batch).
// Logits come back only for the entries that ask for them, in batch order.
//
// Contract (checked by the implementations, errors are one line):
//   - 0 <= seq < maxSequences(), 0 <= pos < ctxSize(), 0 <= token < nVocab();
//   - within one sequence the entries of a batch have consecutive positions, and the first of them
//     continues the sequence (pos == its current length) or restarts it at 0 after forget();
//   - forget(s) drops sequence s's cache: its next entry starts at position 0;
//   - keepPrefix(s, n) (prompt caching, only where canKeepPrefix(s, n)): its next entry is at position n.
// BatchedEngine.h implements it on one runtime session, which checks the same rules and also accepts a
// rewind its caches allow: keepPrefix is such a rewind, done by the next batch. checkBatch() below is the
// contract as code for engines that have no session (the scheduler tests' fake, which keeps a prefix by
// setting its length).
//
// Usage:
//   std::vector<BatchEntry> b = {{tok, pos, seq, /*logits=*/true}, ...};
//   std::vector<float> rows;
//   Expected<void> ok = engine.step(b, rows);  // rows.size() == n_logits * nVocab()
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_ENGINE_H
#define TPC_SERVER_ENGINE_H

#include "runtime/support/Expected.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::server {

/// One token of a batch.
struct BatchEntry {
  int32_t token = 0;
  int32_t pos = 0;     ///< position inside its own sequence
  int32_t seq = 0;     ///< sequence (slot) id
  bool logits = false; ///< return this entry's logits row
};

/// A model that evaluates batches of tokens from several sequences (see the file comment).
class Engine {
public:
  virtual ~Engine() = default;
  /// Evaluates `batch` and leaves in `rows` one row of nVocab() logits per entry with logits == true, in
  /// batch order, row-major. The scheduler passes the same vector every step, so its capacity is reused.
  virtual Expected<void> step(const std::vector<BatchEntry> &batch, std::vector<float> &rows) = 0;
  /// Drops sequence `seq`'s cached tokens (its slot was freed).
  virtual void forget(int32_t seq) = 0;
  /// Prompt caching (server/PromptCache.h): whether sequence `seq` can drop its positions from `n` on and
  /// continue at position n (0 < n <= its length), keeping what the first n hold. Default: never.
  virtual bool canKeepPrefix(int32_t seq, int32_t n) const {
    (void)seq, (void)n;
    return false;
  }
  /// Does it (after canKeepPrefix said yes): the next entry of `seq` is at position n.
  virtual void keepPrefix(int32_t seq, int32_t n) {
    (void)n;
    forget(seq);
  }
  /// Sequences that may be live at once.
  virtual int32_t maxSequences() const = 0;
  /// Positions one sequence may hold.
  virtual int64_t ctxSize() const = 0;
  virtual int64_t nVocab() const = 0;
};

/// Checks `batch` against the contract above given each sequence's current length `lengths[seq]`
/// (updated on success). Empty when fine, else one line naming the entry.
std::string checkBatch(const std::vector<BatchEntry> &batch, std::vector<int64_t> &lengths, int64_t ctx,
                       int64_t nVocab);

} // namespace tpc::server

#endif // TPC_SERVER_ENGINE_H
