//===- StageCommunicator.cpp - stage collectives, point-to-point between stages ===//
//
// StageCommunicator.h. The renumbering is the whole of the collective side: a stage communicator is an
// ordinary communicator of N/S ranks and never learns that other stages exist.
//===----------------------------------------------------------------------===//
#include "runtime/comm/StageCommunicator.h"

#include "runtime/comm/InProcessCommunicator.h"

#include <fmt/core.h>

#include <cstring>

namespace tpc::rt::comm {

StageCommunicator::StageCommunicator(std::shared_ptr<Communicator> world,
                                     std::vector<std::shared_ptr<Communicator>> stages, bool mailbox)
    : world_(std::move(world)), stages_(std::move(stages)), mailbox_(mailbox) {
  perStage_ = stages_.empty() ? world_->size() : world_->size() / static_cast<int>(stages_.size());
  if (mailbox_)
    queues_.resize(static_cast<size_t>(world_->size()) * static_cast<size_t>(world_->size()));
}

std::shared_ptr<StageCommunicator> StageCommunicator::inProcess(int ranks, int stages) {
  std::vector<std::shared_ptr<Communicator>> groups;
  for (int s = 0; s < stages; ++s)
    groups.push_back(std::make_shared<InProcessCommunicator>(ranks / stages));
  return std::make_shared<StageCommunicator>(std::make_shared<InProcessCommunicator>(ranks),
                                             std::move(groups), true);
}

bool StageCommunicator::wholeOptional() const {
  for (const auto &s : stages_)
    if (s && !s->wholeOptional())
      return false;
  return true;
}

Error StageCommunicator::fail(const std::string &why) {
  abort(why);
  return Error{why};
}

Expected<std::pair<Communicator *, int>> StageCommunicator::stageOf(const std::vector<int> &ranks) {
  if (aborted())
    return Error{fmt::format("stage communicator aborted: {}", [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return reason_;
    }())};
  if (ranks.empty())
    return fail("stage communicator: a collective call with no ranks");
  const int s = ranks[0] / perStage_;
  for (int r : ranks)
    if (r < 0 || r >= world_->size() || r / perStage_ != s)
      return fail(fmt::format("stage communicator: one collective call mixes ranks of stages {} and {} (a "
                              "collective stays inside one stage)",
                              s, r / perStage_));
  if (s >= static_cast<int>(stages_.size()) || !stages_[static_cast<size_t>(s)])
    return fail(fmt::format("stage communicator: rank {} is in stage {}, which has no communicator here",
                            ranks[0], s));
  return std::pair<Communicator *, int>{stages_[static_cast<size_t>(s)].get(), s * perStage_};
}

bool StageCommunicator::supportsPayload(Payload p) const {
  for (const std::shared_ptr<Communicator> &c : stages_)
    if (c && !c->supportsPayload(p))
      return false;
  return true;
}

void StageCommunicator::setPayload(Payload p) {
  Communicator::setPayload(p);
  for (const std::shared_ptr<Communicator> &c : stages_)
    if (c)
      c->setPayload(p);
}

Expected<void> StageCommunicator::allReduce(const std::vector<AllReduceEntry> &local, ElemType type) {
  std::vector<int> ranks;
  for (const AllReduceEntry &e : local)
    ranks.push_back(e.rank);
  auto st = stageOf(ranks);
  if (!st)
    return Error{st.message()};
  std::vector<AllReduceEntry> mine = local;
  for (AllReduceEntry &e : mine)
    e.rank -= st->second;
  return st->first->allReduce(mine, type);
}

Expected<void> StageCommunicator::allGather(const std::vector<AllGatherEntry> &local, const AxisParts &layout,
                                            ElemType type) {
  std::vector<int> ranks;
  for (const AllGatherEntry &e : local)
    ranks.push_back(e.rank);
  auto st = stageOf(ranks);
  if (!st)
    return Error{st.message()};
  std::vector<AllGatherEntry> mine = local;
  for (AllGatherEntry &e : mine)
    e.rank -= st->second;
  return st->first->allGather(mine, layout, type);
}

Expected<void> StageCommunicator::reduceScatter(const std::vector<ReduceScatterEntry> &local,
                                                const AxisParts &layout, ElemType type) {
  std::vector<int> ranks;
  for (const ReduceScatterEntry &e : local)
    ranks.push_back(e.rank);
  auto st = stageOf(ranks);
  if (!st)
    return Error{st.message()};
  std::vector<ReduceScatterEntry> mine = local;
  for (ReduceScatterEntry &e : mine)
    e.rank -= st->second;
  return st->first->reduceScatter(mine, layout, type);
}

Expected<void> StageCommunicator::broadcast(const std::vector<BroadcastEntry> &local, int root,
                                            ElemType type) {
  return world_->broadcast(local, root, type);
}

Expected<void> StageCommunicator::barrier(const std::vector<int> &ranks) { return world_->barrier(ranks); }

Expected<void> StageCommunicator::send(int rank, int peer, Buffer buf, ElemType type) {
  if (!mailbox_)
    return world_->send(rank, peer, buf, type);
  const int n = world_->size();
  if (rank < 0 || rank >= n || peer < 0 || peer >= n || rank == peer)
    return fail(fmt::format("stage communicator: send from rank {} to rank {} of {}", rank, peer, n));
  const size_t bytes = static_cast<size_t>(buf.count) * elemBytes(type);
  std::vector<char> msg(bytes);
  if (bytes)
    std::memcpy(msg.data(), buf.data, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load())
      return Error{fmt::format("stage communicator aborted: {}", reason_)};
    queues_[static_cast<size_t>(rank) * n + static_cast<size_t>(peer)].push_back(std::move(msg));
  }
  cv_.notify_all();
  return {};
}

Expected<void> StageCommunicator::recv(int rank, int peer, Buffer buf, ElemType type) {
  if (!mailbox_)
    return world_->recv(rank, peer, buf, type);
  const int n = world_->size();
  if (rank < 0 || rank >= n || peer < 0 || peer >= n || rank == peer)
    return fail(fmt::format("stage communicator: receive on rank {} from rank {} of {}", rank, peer, n));
  std::vector<char> msg;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto &q = queues_[static_cast<size_t>(peer) * n + static_cast<size_t>(rank)];
    cv_.wait(lock, [&] { return aborted_.load() || !q.empty(); });
    if (aborted_.load())
      return Error{fmt::format("stage communicator aborted: {}", reason_)};
    msg = std::move(q.front());
    q.pop_front();
  }
  const size_t bytes = static_cast<size_t>(buf.count) * elemBytes(type);
  if (msg.size() != bytes)
    return fail(fmt::format("stage communicator: rank {} expected {} bytes from rank {}, got {}", rank, bytes,
                            peer, msg.size()));
  if (bytes)
    std::memcpy(buf.data, msg.data(), bytes);
  return {};
}

void StageCommunicator::abort(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.exchange(true))
      reason_ = reason;
  }
  cv_.notify_all();
  world_->abort(reason);
  for (const auto &s : stages_)
    if (s)
      s->abort(reason);
}

bool StageCommunicator::aborted() const {
  if (aborted_.load() || world_->aborted())
    return true;
  for (const auto &s : stages_)
    if (s && s->aborted())
      return true;
  return false;
}

} // namespace tpc::rt::comm
