//===- Lockstep.cpp - rank 0's calls, broadcast and followed ----------------===//
//
// A call is broadcasts from rank 0: the header {what, a, b} and, for Evaluate, the chunk (t tokens, t
// positions, t sequence ids, r output rows). Rank 0's evaluate() has already checked the batch
// (rt::Session::evaluate) and split it into chunks of at most max_batch tokens and max_output_rows rows
// before runChunk sends one chunk, so the followers run exactly rank 0's chunks: each rank's evaluate() of
// a chunk (the rows it asks for marked) is one backend chunk again.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Lockstep.h"

#include <fmt/core.h>

#include <cstring>

namespace tpc::cli {

using namespace tpc::rt;

namespace {
enum What : int32_t { kEvaluate = 1, kFinish = 2, kFailed = 3, kClearSequence = 4 };

int localRank(comm::Communicator &c) { return c.localRanks().front(); }

Expected<void> send(comm::Communicator &c, int32_t *data, int64_t n) {
  return c.broadcast(localRank(c), {data, n}, 0, comm::ElemType::I32);
}
} // namespace

LeaderSession::LeaderSession(std::unique_ptr<Session> inner, comm::Communicator &control, std::string label)
    : Session(inner->plan(), inner->ctxSize(), inner->maxSequences(), inner->devices()),
      inner_(std::move(inner)), control_(control), label_(std::move(label)), seen_(inner_->profile()) {}

LeaderSession::~LeaderSession() = default;

Expected<void> LeaderSession::finish(bool ok) {
  if (finished_ || failedWhileRunning_)
    return {};
  finished_ = true;
  int32_t header[3] = {ok ? kFinish : kFailed, 0, 0};
  return send(control_, header, 3);
}

void LeaderSession::clearSequence(int32_t seq) {
  Session::clearSequence(seq);
  inner_->clearSequence(seq);
  if (finished_ || failedWhileRunning_ || !controlError_.empty())
    return;
  int32_t header[3] = {kClearSequence, seq, 0};
  if (Expected<void> ok = send(control_, header, 3); !ok)
    controlError_ = ok.message();
}

namespace {
/// The chunk as a batch for a session's evaluate(): the rows the chunk computes are the tokens that ask
/// for logits, so evaluate() returns exactly them, in order.
std::vector<BatchToken> chunkBatch(const int32_t *tokens, const int32_t *positions, const int32_t *seqs,
                                   int64_t t, const int32_t *rows, int64_t r) {
  std::vector<BatchToken> batch(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i)
    batch[i] = {tokens[i], positions[i], seqs ? seqs[i] : 0, false};
  for (int64_t i = 0; i < r; ++i)
    batch[rows ? rows[i] : i].logits = true;
  return batch;
}
} // namespace

Expected<void> LeaderSession::runChunk(const Chunk &c, float *logits) {
  if (finished_)
    return Error{"the run was finished; no more calls reach the other ranks"};
  if (!controlError_.empty())
    return Error{"the other ranks missed a call: " + controlError_};
  const int64_t t = c.t, r = c.r;
  int32_t header[3] = {kEvaluate, static_cast<int32_t>(t), static_cast<int32_t>(r)};
  std::vector<int32_t> payload(c.tokens, c.tokens + t);
  payload.insert(payload.end(), c.positions, c.positions + t);
  for (int64_t i = 0; i < t; ++i)
    payload.push_back(c.seqs ? c.seqs[i] : 0);
  for (int64_t i = 0; i < r; ++i)
    payload.push_back(c.rows ? c.rows[i] : static_cast<int32_t>(i));
  if (Expected<void> ok = send(control_, header, 3); !ok)
    return ok;
  if (Expected<void> ok = send(control_, payload.data(), static_cast<int64_t>(payload.size())); !ok)
    return ok;
  // From here the followers run the call: a failure may leave them inside a collective.
  inner_->setProfiling(profiling());
  auto rows = inner_->evaluate(
      chunkBatch(payload.data(), payload.data() + t, payload.data() + 2 * t, t, payload.data() + 3 * t, r));
  if (!rows) {
    failedWhileRunning_ = true;
    return Error{rows.message()};
  }
  if (logits)
    std::memcpy(logits, rows->data(), rows->size() * sizeof(float));
  if (profiling()) { // mirror the inner session's per-step times (one chunk: each step ran at most once)
    const std::vector<StepProfile> now = inner_->profile();
    for (size_t i = 0; i < now.size() && i < seen_.size(); ++i)
      if (now[i].calls > seen_[i].calls)
        recordStep(i, now[i].seconds - seen_[i].seconds);
    seen_ = now;
  }
  return {};
}

Expected<LeaderEnd> follow(Session &session, comm::Communicator &control) {
  using E = Expected<LeaderEnd>;
  std::vector<int32_t> payload;
  for (;;) {
    int32_t header[3] = {0, 0, 0};
    if (Expected<void> ok = send(control, header, 3); !ok)
      return Error{"waiting for rank 0's next call: " + ok.message()};
    if (header[0] == kFinish)
      return E(LeaderEnd::Finished);
    if (header[0] == kFailed)
      return E(LeaderEnd::Failed);
    if (header[0] == kClearSequence) {
      session.clearSequence(header[1]);
      continue;
    }
    const int64_t t = header[1], r = header[2];
    if (header[0] != kEvaluate || t < 1 || t > session.plan().model.maxBatch || r < 0 || r > t)
      return Error{
          fmt::format("rank 0 sent a call this rank does not understand ({} with {} tokens, {} rows); "
                      "do all ranks run the same tpc?",
                      header[0], t, r)};
    payload.resize(static_cast<size_t>(3 * t + r));
    if (Expected<void> ok = send(control, payload.data(), 3 * t + r); !ok)
      return Error{"receiving rank 0's call: " + ok.message()};
    for (int64_t i = 0; i < r; ++i)
      if (payload[3 * t + i] < 0 || payload[3 * t + i] >= t)
        return Error{fmt::format("rank 0 sent output row {} of a {}-token chunk", payload[3 * t + i], t)};
    auto rows = session.evaluate(
        chunkBatch(payload.data(), payload.data() + t, payload.data() + 2 * t, t, payload.data() + 3 * t, r));
    if (!rows)
      return Error{rows.message()};
  }
}

} // namespace tpc::cli
