//===- Attention.cpp - flash-style attention: tiles, segments, threads ------===//
//
// The driver of Attention.h: cuts the call into tiles and work items, runs the ISA's item kernel
// (attention/AttendItem.inc) over the thread group, and merges the segments of a split key range. Every
// choice here depends on the call's shapes and positions only (see Attention.h), so the result does not
// depend on the number of threads.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Attention.h"

#include "runtime/cpu/attention/AttentionKernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

namespace tpc::rt::cpu {

namespace {
const attn::Kernels &kernelsFor(Isa isa) {
  static const attn::Kernels scalar = attn::scalarKernels();
  static const attn::Kernels avx2 = isaAvailable(Isa::AVX2) ? attn::avx2Kernels() : scalar;
  static const attn::Kernels avx512 = isaAvailable(Isa::AVX512) ? attn::avx512Kernels() : avx2;
  // The AVX-512 VNNI level (every AVX-512 machine with VNNI) keeps the AVX2 kernels on purpose: routed to
  // the AVX-512 ones, prefill and depth decode were slower on the Sapphire Rapids VM (docs/performance.md,
  // "Weight types after the folded panels"); the AVX-512 item kernel must win before it is routed there.
  if (isa == Isa::AVX512 && isaAvailable(Isa::AVX512))
    return avx512;
  if (isa != Isa::Scalar && isaAvailable(Isa::AVX2))
    return avx2;
  return scalar;
}

/// Tokens [first, first + count) of one sequence at consecutive positions; their rows see key positions
/// inside [from, to].
struct Tile {
  int64_t first = 0, count = 0, from = 0, to = 0;
};

/// A segment of a tile's key range for one KV head.
struct Work {
  size_t tile = 0;
  int64_t kh = 0, from = 0, to = 0;
  int64_t partial = -1; ///< offset of its unnormalised rows in the partial buffer; -1: finalized in y
  int64_t merge = -1;   ///< the (tile, KV head) whose segments it belongs to; -1: not split
};

/// The segments of one (tile, KV head): items first, first + stride, ... (segments in order).
struct Merge {
  size_t tile = 0;
  int64_t kh = 0;
  size_t first = 0, stride = 0;
  int64_t segments = 0;
};

// A call of at most kSegmentTokens tokens (decode steps, of one sequence or several) cuts each tile's key
// range at multiples of segmentLength(range) positions, so every thread has work even at one KV head (the
// merge costs one pass over the segments' rows). Both depend on the tile's positions alone, not on how
// many heads or threads a device has, so a split plan computes every row the way one device does.
constexpr int64_t kSegmentTokens = 8;
/// About the most segments a range is cut into (up to twice as many): finer segments balance threads
/// better, but every segment adds partial rows to write and merge, and one thread merges a (tile, KV
/// head) while the others may wait (depth 4096: 33 segments of 128 positions, imbalance <= 1.6 %).
constexpr int64_t kMaxSegments = 32;
/// What an item costs beyond its keys, in key-rows (setting up and writing its rows): for the balance.
constexpr int64_t kItemOverhead = 4;

int64_t segmentLength(int64_t range) {
  return attn::kKeyBlock * std::max<int64_t>(1, range / (attn::kKeyBlock * kMaxSegments));
}

/// Merges the segments of `m` (unnormalised rows and their running (max, sum)) into y, in segment order.
void mergeSegments(const AttentionArgs &a, const Tile &tl, const Merge &m, const Work *work, const float *partial) {
  const int64_t group = a.hq / a.hkv, dv = a.dv, rows = tl.count * group;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t r = row / group, h = m.kh * group + row % group;
    float *out = a.y + ((tl.first + r) * a.hq + h) * dv;
    float mx = -INFINITY, l = 0;
    for (int64_t s = 0; s < m.segments; ++s) {
      const float *ml = partial + work[m.first + s * m.stride].partial + rows * dv + 2 * row;
      if (ml[1] > 0)
        mx = std::max(mx, ml[0]);
    }
    std::fill_n(out, dv, 0.0f);
    for (int64_t s = 0; s < m.segments; ++s) {
      const float *seg = partial + work[m.first + s * m.stride].partial;
      const float *ml = seg + rows * dv + 2 * row;
      if (!(ml[1] > 0))
        continue;
      const float c = std::exp(ml[0] - mx);
      l += ml[1] * c;
      for (int64_t d = 0; d < dv; ++d)
        out[d] += c * seg[row * dv + d];
    }
    attn::finishRow(out, dv, mx, l, a.sinks ? a.sinks + h : nullptr);
  }
}

} // namespace

namespace attn {
std::vector<size_t> balancedChunks(const std::vector<int64_t> &cost, int parts) {
  std::vector<size_t> bounds(static_cast<size_t>(parts) + 1, cost.size());
  bounds[0] = 0;
  int64_t total = 0;
  for (int64_t c : cost)
    total += c;
  // Chunk c ends at the item boundary nearest to c/parts of the total (an item straddling the target goes
  // where more than half of it lies).
  size_t i = 0;
  int64_t before = 0;
  for (int c = 1; c < parts; ++c) {
    const int64_t target = total * c / parts;
    while (i < cost.size() && 2 * before + cost[i] <= 2 * target)
      before += cost[i++];
    bounds[static_cast<size_t>(c)] = i;
  }
  return bounds;
}
} // namespace attn

float expShiftSum(float *x, int64_t n, float shift, Isa isa) { return kernelsFor(isa).expShiftSum(x, n, shift); }

void flashAttention(const AttentionArgs &a, ThreadGroup &tg, Isa isa) {
  if (a.t == 0 || a.hkv == 0 || a.hq == 0)
    return;
  const attn::Kernels &kern = kernelsFor(isa);
  const int64_t group = a.hq / a.hkv, dv = a.dv;
  const int64_t tileTokens = std::max<int64_t>(1, attn::kTileRows / group);
  auto seqOf = [&](int64_t i) { return a.seq ? a.seq[i] : 0; };
  auto lowest = [&](int64_t p) { return a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0; };
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < a.t;) {
    int64_t j = i + 1;
    while (j < a.t && j - i < tileTokens && seqOf(j) == seqOf(i) && a.pos[j] == a.pos[j - 1] + 1)
      ++j;
    tiles.push_back({i, j - i, lowest(a.pos[i]), a.pos[j - 1]});
    i = j;
  }
  const bool split = a.t <= kSegmentTokens;
  std::vector<Work> work;
  std::vector<Merge> merges;
  std::vector<int64_t> cost;
  int64_t partialFloats = 0, flops = 0;
  for (size_t ti = 0; ti < tiles.size(); ++ti) {
    const Tile &tl = tiles[ti];
    const int64_t range = tl.to - tl.from + 1, rows = tl.count * group;
    flops += rows * range * (a.dk + a.dv);
    // Segment s covers positions [s * len, (s + 1) * len) of the tile's range.
    const int64_t len = split ? segmentLength(range) : range;
    const int64_t s0 = split ? tl.from / len : 0, s1 = split ? tl.to / len : 0, segs = s1 - s0 + 1;
    if (segs > 1)
      for (int64_t kh = 0; kh < a.hkv; ++kh)
        merges.push_back({ti, kh, work.size() + static_cast<size_t>(kh), static_cast<size_t>(a.hkv), segs});
    // Segment-major: the items of one segment read one contiguous run of cache cells (every KV head's
    // slice of them), so the items a thread takes in turn stream memory instead of striding over it.
    for (int64_t s = s0; s <= s1; ++s)
      for (int64_t kh = 0; kh < a.hkv; ++kh) {
        Work w{ti, kh, split ? std::max(tl.from, s * len) : tl.from, split ? std::min(tl.to, (s + 1) * len - 1) : tl.to,
               -1, -1};
        if (segs > 1) {
          w.partial = partialFloats;
          w.merge = static_cast<int64_t>(merges.size() - static_cast<size_t>(a.hkv - kh));
          partialFloats += rows * (dv + 2); // the rows, then their (max, sum) pairs
        }
        cost.push_back(rows * (w.to - w.from + 1 + kItemOverhead));
        work.push_back(w);
      }
  }
  // Not zeroed: every item writes all of its rows.
  std::unique_ptr<float[]> partial(partialFloats ? new float[static_cast<size_t>(partialFloats)] : nullptr);
  // Segments still to finish per merge: the thread that finishes a (tile, KV head)'s last one merges it,
  // so merges run in parallel and need no second hand-off.
  std::unique_ptr<std::atomic<int64_t>[]> pending(new std::atomic<int64_t>[merges.size()]);
  for (size_t m = 0; m < merges.size(); ++m)
    pending[m].store(merges[m].segments, std::memory_order_relaxed);
  const size_t scratchBytes = static_cast<size_t>(attn::itemScratchFloats(a)) * sizeof(float);
  auto runItems = [&](size_t b, size_t e, int thread) {
    float *scratch = static_cast<float *>(tg.threadScratch(thread, scratchBytes));
    for (size_t i = b; i < e; ++i) {
      const Work &w = work[i];
      const Tile &tl = tiles[w.tile];
      attn::Item it;
      it.first = tl.first, it.count = tl.count, it.kh = w.kh, it.from = w.from, it.to = w.to;
      it.prefetchTo = tl.to;
      if (w.partial < 0) {
        it.out = a.y + (tl.first * a.hq + w.kh * group) * dv;
        it.rowStride = a.hq * dv;
      } else {
        it.out = partial.get() + w.partial;
        it.rowStride = group * dv;
        it.finalize = false;
        it.ml = it.out + tl.count * group * dv;
      }
      kern.attend(a, it, scratch);
      // acq_rel: the merging thread sees every other segment's rows.
      if (w.merge >= 0 && pending[w.merge].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        const Merge &m = merges[static_cast<size_t>(w.merge)];
        mergeSegments(a, tiles[m.tile], m, work.data(), partial.get());
      }
    }
  };
  // Waking the workers costs more than a small decode step (one token, a short context) saves.
  if (flops < (1 << 16) || tg.size() == 1) {
    runItems(0, work.size(), 0);
    return;
  }
  // Contiguous runs of items of about equal cost, one per thread: items differ in size (a segment cut by
  // the range's ends, a prompt tile that sees more keys than the one before it), so equal counts would not
  // balance, and a run keeps a thread's reads contiguous.
  const std::vector<size_t> bounds = attn::balancedChunks(cost, tg.size());
  if (bounds[1] == work.size()) { // one run holds every item: no hand-off (nor a sleeping worker's wake-up)
    runItems(0, work.size(), 0);
    return;
  }
  tg.parallelFor(tg.size(), [&](int64_t b, int64_t e, int thread) {
    for (int64_t c = b; c < e; ++c)
      runItems(bounds[static_cast<size_t>(c)], bounds[static_cast<size_t>(c) + 1], thread);
  });
}

} // namespace tpc::rt::cpu
