//===- Engine.cpp - the batch contract every Engine shares ------------------===//
#include "server/Engine.h"

#include <fmt/core.h>

namespace tpc::server {

std::string checkBatch(const std::vector<BatchEntry> &batch, std::vector<int64_t> &lengths, int64_t ctx,
                       int64_t nVocab) {
  std::vector<int64_t> next = lengths;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry &e = batch[i];
    if (e.seq < 0 || static_cast<size_t>(e.seq) >= next.size())
      return fmt::format("batch entry {}: sequence {} is not in 0..{}", i, e.seq, next.size() - 1);
    if (e.token < 0 || e.token >= nVocab)
      return fmt::format("batch entry {}: token {} is not in 0..{}", i, e.token, nVocab - 1);
    if (e.pos < 0 || e.pos >= ctx)
      return fmt::format("batch entry {}: position {} is outside the context of {} tokens", i, e.pos, ctx);
    if (e.pos != next[e.seq])
      return fmt::format("batch entry {}: sequence {} holds {} tokens, so its next position is {}, not {}", i,
                         e.seq, next[e.seq], next[e.seq], e.pos);
    next[e.seq] = e.pos + 1;
  }
  lengths = std::move(next);
  return {};
}

} // namespace tpc::server
