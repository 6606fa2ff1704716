//===- InProcessCommunicator.cpp - shared-memory rendezvous collectives ----===//
//
// The algorithms of the file comment in InProcessCommunicator.h. The sums keep the order the CPU executor
// always had (rank 0's addend, then += rank 1's, ...), so CPU results are bit for bit what they were
// before the communicator interface existed.
//===----------------------------------------------------------------------===//
#include "runtime/comm/InProcessCommunicator.h"
#include "runtime/comm/Bf16Wire.h"
#include "runtime/support/SpinWait.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace tpc::rt::comm {

namespace {
/// A rank waiting at a barrier spins ~20 us, then yields its core until kSleepAfter, then sleeps
/// (SpinWait.h). Decode meets here twice a layer; sleeping after 20 us (as this did) put a futex wake-up on
/// the critical path whenever one device ran a little late.
constexpr int kBarrierSpin = 300;
constexpr auto kSleepAfter = std::chrono::milliseconds(2);
/// Largest bucket (floats per rank) reduced with one barrier: N full sums of 64 KiB cost less than the two
/// barriers the split path adds; prefill activations (tokens x hidden) are far larger and take that path.
constexpr int64_t kSmallAllReduce = 16384;

template <typename E> std::vector<int> ranksOf(const std::vector<E> &entries) {
  std::vector<int> r;
  for (const E &e : entries)
    r.push_back(e.rank);
  return r;
}

float *floats(const Buffer &b) { return static_cast<float *>(b.data); }
char *bytes(const Buffer &b) { return static_cast<char *>(b.data); }
} // namespace

InProcessCommunicator::InProcessCommunicator(int n)
    : n_(n), bucket_(n), first_(n), second_(n),
      scratch_(n), stage_{std::vector<std::vector<float>>(n), std::vector<std::vector<float>>(n)},
      stageCounts_{std::vector<std::vector<int64_t>>(n), std::vector<std::vector<int64_t>>(n)},
      reduceCalls_(n, 0) {}

std::vector<int> InProcessCommunicator::localRanks() const {
  std::vector<int> r(n_);
  for (int i = 0; i < n_; ++i)
    r[i] = i;
  return r;
}

bool InProcessCommunicator::arrive(int ranks) {
  if (aborted_.load())
    return false;
  const uint64_t gen = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(ranks, std::memory_order_acq_rel) + ranks == n_) {
    arrived_.store(0, std::memory_order_relaxed); // nobody re-enters before the bump below
    {
      std::lock_guard<std::mutex> lock(mu_); // orders the bump against a sleeper's predicate check
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    return !aborted_.load();
  }
  waitUntil(
      [&] {
        return generation_.load(std::memory_order_acquire) != gen || aborted_.load(std::memory_order_relaxed);
      },
      kBarrierSpin, kSleepAfter,
      [&] {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return aborted_.load() || generation_.load() != gen; });
      });
  return !aborted_.load();
}

void InProcessCommunicator::abort(const std::string &reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.load())
    reason_ = reason;
  aborted_ = true;
  cv_.notify_all();
}

Error InProcessCommunicator::abortedError() {
  std::lock_guard<std::mutex> lock(mu_);
  return Error{"in-process communicator aborted: " + reason_};
}

Error InProcessCommunicator::fail(const std::string &why) {
  abort(why);
  return Error{"in-process communicator: " + why};
}

std::string InProcessCommunicator::checkRanks(const std::vector<int> &ranks) const {
  if (ranks.empty())
    return "a call must cover at least one rank";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n_)
      return fmt::format("rank {} is outside 0..{}", ranks[i], n_ - 1);
    for (size_t j = 0; j < i; ++j)
      if (ranks[j] == ranks[i])
        return fmt::format("rank {} appears twice in one call", ranks[i]);
  }
  return "";
}

std::string InProcessCommunicator::checkLayout(const AxisParts &layout, int rank, int64_t partCount,
                                               int64_t wholeCount) const {
  if (layout.parts.size() != size_t(n_))
    return fmt::format("the axis layout has {} parts for {} ranks", layout.parts.size(), n_);
  if (partCount != layout.outer * layout.parts[rank] * layout.inner ||
      wholeCount != layout.outer * layout.total() * layout.inner)
    return fmt::format("rank {} passes {} / {} elements for its part / the whole, the layout says {} / {}",
                       rank, partCount, wholeCount, layout.outer * layout.parts[rank] * layout.inner,
                       layout.outer * layout.total() * layout.inner);
  return "";
}

Expected<void> InProcessCommunicator::allReduce(const std::vector<AllReduceEntry> &local, ElemType type) {
  if (std::string bad = checkRanks(ranksOf(local)); !bad.empty())
    return fail("all-reduce: " + bad);
  if (type != ElemType::F32)
    return fail(fmt::format("all-reduce: sums of {} are not supported (f32 only)", elemTypeName(type)));
  if (aborted_.load())
    return abortedError();
  if (n_ == 1)
    return {};
  // Every rank stages its counts (and, for a small bucket, its addends) in its slot of this call's parity,
  // so that after the first barrier each rank can check every peer's counts without touching the peers'
  // entries, and all ranks agree on the path (it follows from the counts).
  int64_t total = 0;
  for (const AllReduceEntry &e : local) {
    const int p = static_cast<int>(reduceCalls_[e.rank] & 1);
    std::vector<int64_t> &counts = stageCounts_[p][e.rank];
    counts.clear();
    total = 0;
    for (const Buffer &b : e.bucket) {
      counts.push_back(b.count);
      total += b.count;
    }
    bucket_[e.rank] = &e.bucket;
  }
  const bool small = total <= kSmallAllReduce;
  if (small)
    for (const AllReduceEntry &e : local) {
      std::vector<float> &slot = stage_[reduceCalls_[e.rank] & 1][e.rank];
      slot.resize(static_cast<size_t>(total));
      size_t at = 0;
      for (const Buffer &b : e.bucket) {
        if (payload_ == Payload::BF16) // what this rank puts on the wire (Bf16Wire.h)
          for (int64_t j = 0; j < b.count; ++j)
            slot[at + static_cast<size_t>(j)] = roundBf16(floats(b)[j]);
        else
          std::memcpy(slot.data() + at, b.data, b.count * 4);
        at += static_cast<size_t>(b.count);
      }
    }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  for (const AllReduceEntry &e : local) {
    const int p = static_cast<int>(reduceCalls_[e.rank]++ & 1);
    for (int d = 0; d < n_; ++d)
      if (stageCounts_[p][d] != stageCounts_[p][e.rank])
        return fail(fmt::format("all-reduce: rank {} reduces tensors of {} elements, rank {} of {}", e.rank,
                                fmt::join(stageCounts_[p][e.rank], ","), d,
                                fmt::join(stageCounts_[p][d], ",")));
  }
  return small ? allReduceSmall(local) : allReduceSplit(local);
}

Expected<void> InProcessCommunicator::allReduceSmall(const std::vector<AllReduceEntry> &local) {
  for (const AllReduceEntry &e : local) {
    const int p = static_cast<int>((reduceCalls_[e.rank] - 1) & 1); // the parity allReduce staged into
    size_t at = 0;
    for (const Buffer &b : e.bucket) {
      float *dst = floats(b);
      const float *first = stage_[p][0].data() + at;
      std::memcpy(dst, first, b.count * 4);
      for (int d = 1; d < n_; ++d) {
        const float *src = stage_[p][d].data() + at;
        for (int64_t j = 0; j < b.count; ++j)
          dst[j] += src[j];
      }
      if (payload_ == Payload::BF16) // the sum crosses the wire back as bf16 too
        for (int64_t j = 0; j < b.count; ++j)
          dst[j] = roundBf16(dst[j]);
      at += static_cast<size_t>(b.count);
    }
  }
  return {};
}

Expected<void> InProcessCommunicator::allReduceSplit(const std::vector<AllReduceEntry> &local) {
  for (const AllReduceEntry &e : local) {
    const std::vector<Buffer> &bufs = e.bucket;
    std::vector<float> &scratch = scratch_[e.rank];
    size_t need = 0;
    for (const Buffer &b : bufs)
      need += static_cast<size_t>(b.count / n_ + 1);
    scratch.resize(need);
    size_t at = 0;
    for (size_t i = 0; i < bufs.size(); ++i) {
      const int64_t n = bufs[i].count, b = n * e.rank / n_, end = n * (e.rank + 1) / n_;
      float *acc = scratch.data() + at;
      if (payload_ == Payload::BF16) {
        // The small path's sum, element for element: each addend as its rank sends it, the f32 sum in rank
        // order, rounded for the way back.
        for (int64_t j = 0; j < end - b; ++j)
          acc[j] = roundBf16(floats((*bucket_[0])[i])[b + j]);
        for (int d = 1; d < n_; ++d) {
          const float *src = floats((*bucket_[d])[i]) + b;
          for (int64_t j = 0; j < end - b; ++j)
            acc[j] += roundBf16(src[j]);
        }
        for (int64_t j = 0; j < end - b; ++j)
          acc[j] = roundBf16(acc[j]);
      } else {
        std::memcpy(acc, floats((*bucket_[0])[i]) + b, (end - b) * 4);
        for (int d = 1; d < n_; ++d) {
          const float *src = floats((*bucket_[d])[i]) + b;
          for (int64_t j = 0; j < end - b; ++j)
            acc[j] += src[j];
        }
      }
      at += static_cast<size_t>(end - b);
    }
  }
  if (!arrive(static_cast<int>(local.size()))) // every share summed before anyone overwrites an addend
    return abortedError();
  for (const AllReduceEntry &e : local) {
    size_t at = 0;
    for (size_t i = 0; i < e.bucket.size(); ++i) {
      const int64_t n = e.bucket[i].count, b = n * e.rank / n_, end = n * (e.rank + 1) / n_;
      for (int d = 0; d < n_; ++d)
        std::memcpy(floats((*bucket_[d])[i]) + b, scratch_[e.rank].data() + at, (end - b) * 4);
      at += static_cast<size_t>(end - b);
    }
  }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  return {};
}

Expected<void> InProcessCommunicator::allGather(const std::vector<AllGatherEntry> &local,
                                                const AxisParts &layout, ElemType type) {
  if (std::string bad = checkRanks(ranksOf(local)); !bad.empty())
    return fail("all-gather: " + bad);
  for (const AllGatherEntry &e : local) {
    if (std::string bad = checkLayout(layout, e.rank, e.part.count, e.whole.count); !bad.empty())
      return fail("all-gather: " + bad);
    first_[e.rank] = e.part;
    second_[e.rank] = e.whole;
  }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  // Each rank pushes its own part into every whole that is wanted: the ranks fill a whole in parallel, and
  // a rank that needs none (a null whole: the logits of a device whose caller reads device 0's) costs nothing.
  const size_t es = elemBytes(type);
  const int64_t total = layout.total(), inner = layout.inner;
  for (const AllGatherEntry &e : local) {
    const int64_t part = layout.parts[e.rank], at = layout.offset(e.rank);
    for (int d = 0; d < n_; ++d) {
      if (!second_[d].data)
        continue;
      for (int64_t o = 0; o < layout.outer; ++o)
        std::memcpy(bytes(second_[d]) + (o * total + at) * inner * es, bytes(e.part) + o * part * inner * es,
                    part * inner * es);
    }
  }
  if (!arrive(static_cast<int>(local.size()))) // every whole complete before anyone reads or reuses a part
    return abortedError();
  return {};
}

Expected<void> InProcessCommunicator::reduceScatter(const std::vector<ReduceScatterEntry> &local,
                                                    const AxisParts &layout, ElemType type) {
  if (std::string bad = checkRanks(ranksOf(local)); !bad.empty())
    return fail("reduce-scatter: " + bad);
  if (type != ElemType::F32)
    return fail(fmt::format("reduce-scatter: sums of {} are not supported (f32 only)", elemTypeName(type)));
  for (const ReduceScatterEntry &e : local) {
    if (std::string bad = checkLayout(layout, e.rank, e.part.count, e.whole.count); !bad.empty())
      return fail("reduce-scatter: " + bad);
    first_[e.rank] = e.whole;
  }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  const int64_t dim = layout.total(), inner = layout.inner;
  for (const ReduceScatterEntry &e : local) {
    const int64_t offset = layout.offset(e.rank), size = layout.parts[e.rank];
    for (int64_t o = 0; o < layout.outer; ++o) {
      float *dst = floats(e.part) + o * size * inner;
      const int64_t src = (o * dim + offset) * inner;
      std::memcpy(dst, floats(first_[0]) + src, size * inner * 4);
      for (int d = 1; d < n_; ++d) {
        const float *p = floats(first_[d]) + src;
        for (int64_t j = 0; j < size * inner; ++j)
          dst[j] += p[j];
      }
    }
  }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  return {};
}

Expected<void> InProcessCommunicator::broadcast(const std::vector<BroadcastEntry> &local, int root,
                                                ElemType type) {
  if (std::string bad = checkRanks(ranksOf(local)); !bad.empty())
    return fail("broadcast: " + bad);
  if (root < 0 || root >= n_)
    return fail(fmt::format("broadcast: root {} is outside 0..{}", root, n_ - 1));
  for (const BroadcastEntry &e : local)
    first_[e.rank] = e.buf;
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  for (const BroadcastEntry &e : local) {
    if (e.buf.count != first_[root].count)
      return fail(fmt::format("broadcast: rank {} receives {} elements, the root sends {}", e.rank,
                              e.buf.count, first_[root].count));
    if (e.rank != root)
      std::memcpy(e.buf.data, first_[root].data, e.buf.count * elemBytes(type));
  }
  if (!arrive(static_cast<int>(local.size())))
    return abortedError();
  return {};
}

Expected<void> InProcessCommunicator::barrier(const std::vector<int> &ranks) {
  if (std::string bad = checkRanks(ranks); !bad.empty())
    return fail("barrier: " + bad);
  if (!arrive(static_cast<int>(ranks.size())))
    return abortedError();
  return {};
}

} // namespace tpc::rt::comm
