//===- BatchedEngine.cpp - the Engine on one multi-sequence session ---------===//
#include "server/BatchedEngine.h"

#include "runtime/backends/Backends.h"

namespace tpc::server {

Expected<std::unique_ptr<BatchedEngine>> BatchedEngine::open(const rt::Plan &plan, int32_t nSeq,
                                                             rt::SessionOptions opts, const std::string &backend) {
  opts.sequences = nSeq;
  auto b = rt::builtinBackends().select(backend);
  if (!b)
    return Error{"--backend: " + b.message()};
  auto s = (*b)->open(plan, opts);
  if (!s)
    return Error{s.message()};
  return std::make_unique<BatchedEngine>(s.take());
}

Expected<void> BatchedEngine::step(const std::vector<BatchEntry> &batch, std::vector<float> &rows) {
  batch_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    batch_[i] = {batch[i].token, batch[i].pos, batch[i].seq, batch[i].logits};
  return s_->evaluate(batch_, rows);
}

bool BatchedEngine::canKeepPrefix(int32_t seq, int32_t n) const {
  const int64_t len = s_->sequenceLength(seq);
  if (n <= 0 || n > len)
    return false;
  // A recurrent state holds only its sequence's end: a rewind would recompute from 0 (no saving).
  if (s_->recomputesRewinds())
    return n == len;
  // The session's own rule for a rewind (a sliding-window ring may have overwritten what it reads).
  return s_->checkBatch({rt::BatchToken{0, n, seq, true}}).empty();
}

} // namespace tpc::server
