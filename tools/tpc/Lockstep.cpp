//===- Lockstep.cpp - rank 0's calls, broadcast and followed ----------------===//
//
// A call is two broadcasts from rank 0: the header {what, t} and, for Evaluate, t token ids then t
// positions. Rank 0's evaluate() has already checked the arguments (rt::Session::evaluate) and split long
// prompts into chunks of at most max_batch tokens before runChunk sends one chunk, so the followers run
// exactly rank 0's chunks.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Lockstep.h"

#include <fmt/core.h>

#include <cstring>

namespace tpc::cli {

using namespace tpc::rt;

namespace {
enum What : int32_t { kEvaluate = 1, kFinish = 2, kFailed = 3 };

int localRank(comm::Communicator &c) { return c.localRanks().front(); }

Expected<void> send(comm::Communicator &c, int32_t *data, int64_t n) {
  return c.broadcast(localRank(c), {data, n}, 0, comm::ElemType::I32);
}
} // namespace

LeaderSession::LeaderSession(std::unique_ptr<Session> inner, comm::Communicator &control, std::string label)
    : Session(inner->plan(), inner->ctxSize(), inner->devices()), inner_(std::move(inner)), control_(control),
      label_(std::move(label)), seen_(inner_->profile()) {}

LeaderSession::~LeaderSession() = default;

Expected<void> LeaderSession::finish(bool ok) {
  if (finished_ || failedWhileRunning_)
    return {};
  finished_ = true;
  int32_t header[2] = {ok ? kFinish : kFailed, 0};
  return send(control_, header, 2);
}

Expected<void> LeaderSession::runChunk(const int32_t *tokens, const int32_t *positions, int64_t t,
                                       float *logits) {
  if (finished_)
    return Error{"the run was finished; no more calls reach the other ranks"};
  int32_t header[2] = {kEvaluate, static_cast<int32_t>(t)};
  std::vector<int32_t> payload(tokens, tokens + t);
  payload.insert(payload.end(), positions, positions + t);
  if (Expected<void> ok = send(control_, header, 2); !ok)
    return ok;
  if (Expected<void> ok = send(control_, payload.data(), 2 * t); !ok)
    return ok;
  // From here the followers run the call: a failure may leave them inside a collective.
  inner_->setProfiling(profiling());
  auto rows = inner_->evaluate(std::vector<int32_t>(tokens, tokens + t), std::vector<int32_t>(positions, positions + t));
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
    int32_t header[2] = {0, 0};
    if (Expected<void> ok = send(control, header, 2); !ok)
      return Error{"waiting for rank 0's next call: " + ok.message()};
    if (header[0] == kFinish)
      return E(LeaderEnd::Finished);
    if (header[0] == kFailed)
      return E(LeaderEnd::Failed);
    const int64_t t = header[1];
    if (header[0] != kEvaluate || t < 1 || t > session.plan().model.maxBatch)
      return Error{fmt::format("rank 0 sent a call this rank does not understand ({} with {} tokens); do all "
                               "ranks run the same tpc?",
                               header[0], t)};
    payload.resize(static_cast<size_t>(2 * t));
    if (Expected<void> ok = send(control, payload.data(), 2 * t); !ok)
      return Error{"receiving rank 0's call: " + ok.message()};
    auto rows = session.evaluate(std::vector<int32_t>(payload.begin(), payload.begin() + t),
                                 std::vector<int32_t>(payload.begin() + t, payload.end()));
    if (!rows)
      return Error{rows.message()};
  }
}

} // namespace tpc::cli
