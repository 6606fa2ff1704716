//===- SessionEngine.cpp - the Engine on today's runtime sessions ---------===//
//
// Also holds checkBatch(), the contract check every Engine shares (Engine.h).
//===----------------------------------------------------------------------===//
#include "server/SessionEngine.h"

#include <fmt/core.h>

#include <map>

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

SessionEngine::SessionEngine(std::vector<EvaluateFn> perSequence, int64_t ctxSize, int64_t nVocab)
    : seqs_(std::move(perSequence)), lengths_(seqs_.size(), 0), ctx_(ctxSize), vocab_(nVocab) {}

Expected<std::unique_ptr<SessionEngine>> SessionEngine::openCpu(const rt::Plan &plan, int32_t nSeq,
                                                                const rt::SessionOptions &opts) {
  std::vector<EvaluateFn> fns;
  std::vector<std::shared_ptr<rt::Session>> owned;
  int64_t ctx = 0;
  for (int32_t s = 0; s < nSeq; ++s) {
    auto session = rt::Session::open(plan, opts);
    if (!session)
      return Error{fmt::format("slot {}: {}", s, session.message())};
    std::shared_ptr<rt::Session> shared = session.take();
    ctx = shared->ctxSize();
    fns.push_back([raw = shared.get()](const std::vector<int32_t> &t, const std::vector<int32_t> &p) {
      return raw->evaluate(t, p);
    });
    owned.push_back(std::move(shared));
  }
  auto engine = std::make_unique<SessionEngine>(std::move(fns), ctx, plan.model.nVocab);
  engine->owned_ = std::move(owned);
  return engine;
}

Expected<std::vector<float>> SessionEngine::step(const std::vector<BatchEntry> &batch) {
  if (std::string err = checkBatch(batch, lengths_, ctx_, vocab_); !err.empty())
    return Error{err};
  // Each sequence's tokens in batch order; rows of the sequences are then gathered back in batch order.
  std::map<int32_t, std::vector<size_t>> bySeq;
  for (size_t i = 0; i < batch.size(); ++i)
    bySeq[batch[i].seq].push_back(i);
  std::vector<const float *> rowOf(batch.size(), nullptr);
  std::vector<std::vector<float>> results;
  results.reserve(bySeq.size());
  for (const auto &[seq, idx] : bySeq) {
    std::vector<int32_t> tokens, positions;
    for (size_t i : idx)
      tokens.push_back(batch[i].token), positions.push_back(batch[i].pos);
    auto rows = seqs_[static_cast<size_t>(seq)](tokens, positions);
    if (!rows)
      return Error{fmt::format("sequence {}: {}", seq, rows.message())};
    if (rows->size() != idx.size() * static_cast<size_t>(vocab_))
      return Error{fmt::format("sequence {}: the session returned {} logits for {} tokens", seq, rows->size(),
                               idx.size())};
    results.push_back(rows.take());
    for (size_t k = 0; k < idx.size(); ++k)
      rowOf[idx[k]] = results.back().data() + k * static_cast<size_t>(vocab_);
  }
  std::vector<float> out;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].logits)
      out.insert(out.end(), rowOf[i], rowOf[i] + vocab_);
  return out;
}

void SessionEngine::forget(int32_t seq) {
  if (seq >= 0 && static_cast<size_t>(seq) < lengths_.size())
    lengths_[static_cast<size_t>(seq)] = 0;
}

} // namespace tpc::server
