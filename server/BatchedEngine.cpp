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

} // namespace tpc::server
