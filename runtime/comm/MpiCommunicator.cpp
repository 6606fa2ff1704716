//===- MpiCommunicator.cpp - the algorithms of MpiCommunicator.h ------------===//
//
// Each collective checks its arguments on this rank, then runs its MPI calls. A rank that finds bad
// arguments returns the error without entering MPI; its peers then wait inside MPI until the job ends
// (the launcher glue ends it on any error after the ranks started working together).
//===----------------------------------------------------------------------===//
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/Bf16Wire.h"

#include <fmt/core.h>
#include <mpi.h>

#include <climits>
#include <cstring>

namespace tpc::rt::comm {

namespace {
MPI_Comm commOf(const std::shared_ptr<void> &h) { return *static_cast<const MPI_Comm *>(h.get()); }

/// The MPI type of one element: sums are f32 only; moves need only the width.
MPI_Datatype mpiType(ElemType t) {
  switch (t) {
  case ElemType::F32:
    return MPI_FLOAT;
  case ElemType::F16:
    return MPI_UINT16_T;
  case ElemType::I32:
    return MPI_INT32_T;
  }
  return MPI_FLOAT;
}

bool fitsInt(int64_t n) { return n >= 0 && n <= INT_MAX; }

/// Largest bf16 bucket (elements) gathered whole at 3+ ranks (decode's hidden vectors; as the in-process
/// communicator's one-barrier path).
constexpr int64_t kSmallBf16 = 16384;

std::string mpiError(int code) { return MpiWorld::errorText(code); }

template <typename E> std::vector<int> ranksOf(const std::vector<E> &entries) {
  std::vector<int> r;
  for (const E &e : entries)
    r.push_back(e.rank);
  return r;
}

/// "" when the layout has one part per rank and `rank`'s buffers have its sizes.
std::string checkLayout(const AxisParts &layout, int n, int rank, int64_t partCount, int64_t wholeCount) {
  if (layout.parts.size() != size_t(n))
    return fmt::format("the axis layout has {} parts for {} ranks", layout.parts.size(), n);
  const int64_t part = layout.outer * layout.parts[rank] * layout.inner,
                whole = layout.outer * layout.total() * layout.inner;
  if (partCount != part || wholeCount != whole)
    return fmt::format("rank {} passes {} / {} elements for its part / the whole, the layout says {} / {}",
                       rank, partCount, wholeCount, part, whole);
  if (!fitsInt(whole))
    return fmt::format("{} elements exceed MPI's int counts", whole);
  return "";
}
} // namespace

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiWorld> world, MpiSums sums)
    : MpiCommunicator(std::move(world), -1, sums) {}

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiWorld> world, int group, MpiSums sums)
    : world_(std::move(world)), sums_(sums), rank_(world_->rank()), size_(world_->size()) {
  auto *c = new MPI_Comm(MPI_COMM_NULL);
  comm_ = std::shared_ptr<void>(c, [](void *p) {
    auto *m = static_cast<MPI_Comm *>(p);
    if (*m != MPI_COMM_NULL)
      MPI_Comm_free(m);
    delete m;
  });
  const MPI_Comm w = *static_cast<const MPI_Comm *>(world_->handle());
  // A group: the world's ranks of one pipeline stage, in world order (every rank calls the split).
  if ((group < 0 ? MPI_Comm_dup(w, c) : MPI_Comm_split(w, group, world_->rank(), c)) != MPI_SUCCESS) {
    *c = MPI_COMM_NULL;
    abort(group < 0 ? "MPI_Comm_dup failed" : "MPI_Comm_split failed");
    return;
  }
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(*c, &rank_);
  MPI_Comm_size(*c, &size_);
}

struct MpiCommunicator::PendingSend {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> bytes;
};

MpiCommunicator::~MpiCommunicator() {
  // Sends still in flight complete once their receivers take them (every rank runs the same steps); an
  // aborted job does not wait for a peer that may be gone.
  for (auto &p : pending_) {
    if (aborted_.load())
      MPI_Cancel(&p->request);
    MPI_Wait(&p->request, MPI_STATUS_IGNORE);
  }
}

void MpiCommunicator::abort(const std::string &reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.load())
    reason_ = reason;
  aborted_ = true;
}

Error MpiCommunicator::fail(const char *what, const std::string &why) {
  abort(fmt::format("{}: {}", what, why));
  return Error{fmt::format("mpi communicator: {}: {}", what, why)};
}

Expected<void> MpiCommunicator::mpiCheck(const char *what, int rc) {
  if (rc == MPI_SUCCESS)
    return {};
  return fail(what, mpiError(rc));
}

std::string MpiCommunicator::checkCall(const char *what, const std::vector<int> &ranks) {
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    return fmt::format("mpi communicator aborted: {}", reason_);
  }
  if (ranks.size() != 1 || ranks[0] != rank_)
    return fail(what, fmt::format("a call must carry exactly this process's rank {} (got {} entries{})",
                                  rank_, ranks.size(),
                                  ranks.size() == 1 ? fmt::format(", rank {}", ranks[0]) : ""))
        .message;
  return "";
}

namespace {
/// The two-step rank-order sum's exchange of n elements over `size` ranks: rank r owns elements
/// [n r / size, n (r + 1) / size); every rank sends each owner its part (alltoallv) and receives the
/// owner's `mine` elements from every rank, in rank order.
struct ShareLayout {
  std::vector<int> sendCounts, sendDispls, recvCounts, recvDispls;
  int mine = 0;
};
ShareLayout shareLayout(int64_t n, int size, int me) {
  ShareLayout l;
  auto share = [&](int r) { return n * r / size; };
  l.mine = static_cast<int>(share(me + 1) - share(me));
  for (int r = 0; r < size; ++r) {
    l.sendCounts.push_back(static_cast<int>(share(r + 1) - share(r)));
    l.sendDispls.push_back(static_cast<int>(share(r)));
    l.recvCounts.push_back(l.mine);
    l.recvDispls.push_back(r * l.mine);
  }
  return l;
}
} // namespace

Expected<void> MpiCommunicator::rankOrderSum(float *x, int64_t n) {
  const int size = size_, me = rank_;
  const ShareLayout l = shareLayout(n, size, me);
  const std::vector<int> &sendCounts = l.sendCounts, &sendDispls = l.sendDispls, &recvCounts = l.recvCounts,
                         &recvDispls = l.recvDispls;
  const int mine = l.mine;
  recv_.resize(static_cast<size_t>(mine) * size);
  const MPI_Comm c = commOf(comm_);
  if (auto ok = mpiCheck("all-reduce", MPI_Alltoallv(x, sendCounts.data(), sendDispls.data(), MPI_FLOAT,
                                                     recv_.data(), recvCounts.data(), recvDispls.data(),
                                                     MPI_FLOAT, c));
      !ok)
    return ok;
  // Rank order, as the in-process communicator: acc = x0, acc += x1, ...
  float *acc = x + sendDispls[me]; // this rank's share
  std::memcpy(acc, recv_.data(), static_cast<size_t>(mine) * 4);
  for (int r = 1; r < size; ++r) {
    const float *src = recv_.data() + static_cast<size_t>(r) * mine;
    for (int j = 0; j < mine; ++j)
      acc[j] += src[j];
  }
  return mpiCheck("all-reduce", MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, sendCounts.data(),
                                               sendDispls.data(), MPI_FLOAT, c));
}

Expected<void> MpiCommunicator::rankOrderSumBf16(float *x, int64_t n) {
  const int size = size_, me = rank_; // this communicator's group (a pipeline stage's ranks, or all)
  if (size == 2 || n <= kSmallBf16) {
    // One step instead of two (decode between hosts pays per message): every rank gathers every rank's
    // bf16 addends and sums them itself, in rank order, to the same bits. At 2 ranks that moves as many
    // bytes as the two-step exchange; from 3 on more, which only small buckets can afford.
    wire_.resize(static_cast<size_t>(n) * (size + 1));
    uint16_t *mine = wire_.data(), *all = mine + n;
    packBf16(x, mine, n);
    if (auto ok = mpiCheck("all-reduce", MPI_Allgather(mine, static_cast<int>(n), MPI_UINT16_T, all,
                                                       static_cast<int>(n), MPI_UINT16_T, commOf(comm_)));
        !ok)
      return ok;
    unpackBf16(all, x, n);
    for (int r = 1; r < size; ++r) {
      const uint16_t *src = all + static_cast<size_t>(r) * n;
      for (int64_t j = 0; j < n; ++j)
        x[j] += fromBf16(src[j]);
    }
    for (int64_t j = 0; j < n; ++j)
      x[j] = roundBf16(x[j]);
    return {};
  }
  const ShareLayout l = shareLayout(n, size, me);
  const std::vector<int> &sendCounts = l.sendCounts, &sendDispls = l.sendDispls, &recvCounts = l.recvCounts,
                         &recvDispls = l.recvDispls;
  const int mine = l.mine;
  // The addends leave as bf16; the rank-order f32 sum of this rank's share goes back as bf16 too, gathered
  // in place into the packed addends (every rank's share lands where its addends were).
  wire_.resize(static_cast<size_t>(n) + static_cast<size_t>(mine) * size);
  uint16_t *packed = wire_.data(), *recv = packed + n;
  packBf16(x, packed, n);
  const MPI_Comm c = commOf(comm_);
  if (auto ok = mpiCheck("all-reduce", MPI_Alltoallv(packed, sendCounts.data(), sendDispls.data(), MPI_UINT16_T,
                                                     recv, recvCounts.data(), recvDispls.data(), MPI_UINT16_T, c));
      !ok)
    return ok;
  float *acc = x + sendDispls[me]; // this rank's share
  unpackBf16(recv, acc, mine);
  for (int r = 1; r < size; ++r) {
    const uint16_t *src = recv + static_cast<size_t>(r) * mine;
    for (int j = 0; j < mine; ++j)
      acc[j] += fromBf16(src[j]);
  }
  packBf16(acc, packed + sendDispls[me], mine);
  if (auto ok = mpiCheck("all-reduce", MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_UINT16_T, packed, sendCounts.data(),
                                                      sendDispls.data(), MPI_UINT16_T, c));
      !ok)
    return ok;
  unpackBf16(packed, x, n);
  return {};
}

Expected<void> MpiCommunicator::allReduce(const std::vector<AllReduceEntry> &local, ElemType type) {
  if (std::string bad = checkCall("all-reduce", ranksOf(local)); !bad.empty())
    return Error{bad};
  if (type != ElemType::F32)
    return fail("all-reduce", fmt::format("sums of {} are not supported (f32 only)", elemTypeName(type)));
  const std::vector<Buffer> &bucket = local[0].bucket;
  int64_t n = 0;
  for (const Buffer &b : bucket)
    n += b.count;
  if (!fitsInt(n))
    return fail("all-reduce", fmt::format("{} elements exceed MPI's int counts", n));
  if (size_ == 1 || n == 0)
    return {};
  // One buffer per collective: the bucket's tensors packed (a single tensor is used in place).
  float *x = bucket.size() == 1 ? static_cast<float *>(bucket[0].data) : nullptr;
  if (!x) {
    pack_.resize(static_cast<size_t>(n));
    int64_t at = 0;
    for (const Buffer &b : bucket) {
      std::memcpy(pack_.data() + at, b.data, static_cast<size_t>(b.count) * 4);
      at += b.count;
    }
    x = pack_.data();
  }
  // bf16 payloads always take the rank-order exchange: MPI_Allreduce has no sum that widens to f32.
  Expected<void> ok = payload_ == Payload::BF16 ? rankOrderSumBf16(x, n)
                      : (sums_ == MpiSums::Native || size_ == 2)
                          ? mpiCheck("all-reduce", MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(n), MPI_FLOAT,
                                                                 MPI_SUM, commOf(comm_)))
                          : rankOrderSum(x, n);
  if (!ok || bucket.size() == 1)
    return ok;
  int64_t at = 0;
  for (const Buffer &b : bucket) {
    std::memcpy(b.data, pack_.data() + at, static_cast<size_t>(b.count) * 4);
    at += b.count;
  }
  return {};
}

Expected<void> MpiCommunicator::allGather(const std::vector<AllGatherEntry> &local, const AxisParts &layout,
                                          ElemType type) {
  if (std::string bad = checkCall("all-gather", ranksOf(local)); !bad.empty())
    return Error{bad};
  const AllGatherEntry &e = local[0];
  const int size = size_, me = rank_;
  if (std::string bad = checkLayout(layout, size, me, e.part.count, e.whole.count); !bad.empty())
    return fail("all-gather", bad);
  const size_t es = elemBytes(type);
  const int64_t outer = layout.outer, inner = layout.inner, total = layout.total();
  std::vector<int> counts(size), displs(size);
  for (int r = 0; r < size; ++r) {
    counts[r] = static_cast<int>(outer * layout.parts[r] * inner);
    displs[r] = static_cast<int>(outer * layout.offset(r) * inner);
  }
  const MPI_Comm c = commOf(comm_);
  const MPI_Datatype t = mpiType(type);
  if (outer == 1) // the parts are contiguous, in rank order, in the whole
    return mpiCheck("all-gather",
                    MPI_Allgatherv(e.part.data, counts[me], t, e.whole.data, counts.data(), displs.data(), t, c));
  // [outer, parts[r], inner] blocks arrive rank after rank; interleave them into [outer, total, inner].
  stage_.resize(static_cast<size_t>(e.whole.count) * es);
  if (auto ok = mpiCheck("all-gather", MPI_Allgatherv(e.part.data, counts[me], t, stage_.data(), counts.data(),
                                                      displs.data(), t, c));
      !ok)
    return ok;
  char *whole = static_cast<char *>(e.whole.data);
  for (int r = 0; r < size; ++r) {
    const size_t row = static_cast<size_t>(layout.parts[r] * inner) * es;
    const char *src = stage_.data() + static_cast<size_t>(displs[r]) * es;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(whole + static_cast<size_t>((o * total + layout.offset(r)) * inner) * es, src + o * row, row);
  }
  return {};
}

Expected<void> MpiCommunicator::reduceScatter(const std::vector<ReduceScatterEntry> &local,
                                              const AxisParts &layout, ElemType type) {
  if (std::string bad = checkCall("reduce-scatter", ranksOf(local)); !bad.empty())
    return Error{bad};
  if (type != ElemType::F32)
    return fail("reduce-scatter", fmt::format("sums of {} are not supported (f32 only)", elemTypeName(type)));
  const ReduceScatterEntry &e = local[0];
  const int size = size_, me = rank_;
  if (std::string bad = checkLayout(layout, size, me, e.part.count, e.whole.count); !bad.empty())
    return fail("reduce-scatter", bad);
  const int64_t outer = layout.outer, inner = layout.inner, total = layout.total();
  // Rank q gets [outer, parts[q], inner] of every whole: pack those blocks in rank order, then exchange.
  std::vector<int> sendCounts(size), sendDispls(size), recvCounts(size), recvDispls(size);
  const int mine = static_cast<int>(e.part.count);
  for (int r = 0; r < size; ++r) {
    sendCounts[r] = static_cast<int>(outer * layout.parts[r] * inner);
    sendDispls[r] = static_cast<int>(outer * layout.offset(r) * inner);
    recvCounts[r] = mine;
    recvDispls[r] = r * mine;
  }
  const float *whole = static_cast<const float *>(e.whole.data);
  const float *send = whole;
  if (outer > 1) {
    pack_.resize(static_cast<size_t>(e.whole.count));
    for (int r = 0; r < size; ++r) {
      const int64_t row = layout.parts[r] * inner;
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(pack_.data() + sendDispls[r] + o * row, whole + (o * total + layout.offset(r)) * inner,
                    static_cast<size_t>(row) * 4);
    }
    send = pack_.data();
  }
  recv_.resize(static_cast<size_t>(mine) * size);
  if (auto ok = mpiCheck("reduce-scatter",
                         MPI_Alltoallv(send, sendCounts.data(), sendDispls.data(), MPI_FLOAT, recv_.data(),
                                       recvCounts.data(), recvDispls.data(), MPI_FLOAT, commOf(comm_)));
      !ok)
    return ok;
  float *part = static_cast<float *>(e.part.data);
  if (mine == 0)
    return {};
  std::memcpy(part, recv_.data(), static_cast<size_t>(mine) * 4); // rank order: x0 + x1 + ...
  for (int r = 1; r < size; ++r) {
    const float *src = recv_.data() + static_cast<size_t>(r) * mine;
    for (int j = 0; j < mine; ++j)
      part[j] += src[j];
  }
  return {};
}

Expected<void> MpiCommunicator::broadcast(const std::vector<BroadcastEntry> &local, int root, ElemType type) {
  if (std::string bad = checkCall("broadcast", ranksOf(local)); !bad.empty())
    return Error{bad};
  if (root < 0 || root >= size_)
    return fail("broadcast", fmt::format("root {} is outside 0..{}", root, size_ - 1));
  const Buffer &b = local[0].buf;
  if (!fitsInt(b.count))
    return fail("broadcast", fmt::format("{} elements exceed MPI's int counts", b.count));
  // MPI_Bcast needs equal counts; a disagreement is an MPI error (MPI_ERR_TRUNCATE) on the receiving rank.
  return mpiCheck("broadcast", MPI_Bcast(b.data, static_cast<int>(b.count), mpiType(type), root, commOf(comm_)));
}

Expected<void> MpiCommunicator::barrier(const std::vector<int> &ranks) {
  if (std::string bad = checkCall("barrier", ranks); !bad.empty())
    return Error{bad};
  return mpiCheck("barrier", MPI_Barrier(commOf(comm_)));
}

Expected<void> MpiCommunicator::send(int rank, int peer, Buffer buf, ElemType type) {
  if (std::string e = checkCall("send", {rank}); !e.empty())
    return Error{e};
  if (peer < 0 || peer >= size_ || peer == rank_)
    return fail("send", fmt::format("peer {} is outside 0..{} or this rank", peer, size_ - 1));
  const int64_t bytes = buf.count * static_cast<int64_t>(elemBytes(type));
  if (bytes > INT32_MAX)
    return fail("send", fmt::format("{} bytes exceed MPI's int count", bytes));
  // Reap the sends that completed (a pipeline stage runs ahead by a few micro-batches at most).
  for (size_t i = 0; i < pending_.size();) {
    int done = 0;
    if (Expected<void> ok = mpiCheck("send", MPI_Test(&pending_[i]->request, &done, MPI_STATUS_IGNORE)); !ok)
      return ok;
    if (done)
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    else
      ++i;
  }
  auto p = std::make_unique<PendingSend>();
  p->bytes.assign(static_cast<const char *>(buf.data), static_cast<const char *>(buf.data) + bytes);
  if (Expected<void> ok = mpiCheck("send", MPI_Isend(p->bytes.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0,
                                                     *static_cast<MPI_Comm *>(comm_.get()), &p->request));
      !ok)
    return ok;
  pending_.push_back(std::move(p));
  return {};
}

Expected<void> MpiCommunicator::recv(int rank, int peer, Buffer buf, ElemType type) {
  if (std::string e = checkCall("recv", {rank}); !e.empty())
    return Error{e};
  if (peer < 0 || peer >= size_ || peer == rank_)
    return fail("recv", fmt::format("peer {} is outside 0..{} or this rank", peer, size_ - 1));
  const int64_t bytes = buf.count * static_cast<int64_t>(elemBytes(type));
  if (bytes > INT32_MAX)
    return fail("recv", fmt::format("{} bytes exceed MPI's int count", bytes));
  MPI_Status st;
  if (Expected<void> ok = mpiCheck("recv", MPI_Recv(buf.data, static_cast<int>(bytes), MPI_BYTE, peer, 0,
                                                    *static_cast<MPI_Comm *>(comm_.get()), &st));
      !ok)
    return ok;
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (got != bytes)
    return fail("recv", fmt::format("expected {} bytes from rank {}, got {}", bytes, peer, got));
  return {};
}

} // namespace tpc::rt::comm
