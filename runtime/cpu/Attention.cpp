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
#include <cmath>
#include <vector>

namespace tpc::rt::cpu {

namespace {
const attn::Kernels &kernelsFor(Isa isa) {
  static const attn::Kernels scalar = attn::scalarKernels();
  static const attn::Kernels avx2 = isaAvailable(Isa::AVX2) ? attn::avx2Kernels() : scalar;
  static const attn::Kernels avx512 = isaAvailable(Isa::AVX512) ? attn::avx512Kernels() : avx2;
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
};

// A call of at most kSegmentTokens tokens (decode steps, of one sequence or several) cuts each key range
// at multiples of kSegment positions, so a step at a long context keeps every thread busy (the merge costs
// one pass over the segments' rows). Both depend on the call alone, not on how many heads a device holds,
// so a split plan computes every row the way one device does.
constexpr int64_t kSegmentTokens = 8;
constexpr int64_t kSegment = 256;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
} // namespace

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
  int64_t longest = 0;
  for (int64_t i = 0; i < a.t;) {
    int64_t j = i + 1;
    while (j < a.t && j - i < tileTokens && seqOf(j) == seqOf(i) && a.pos[j] == a.pos[j - 1] + 1)
      ++j;
    tiles.push_back({i, j - i, lowest(a.pos[i]), a.pos[j - 1]});
    longest = std::max(longest, a.pos[j - 1] - lowest(a.pos[i]) + 1);
    i = j;
  }
  const bool split = a.t <= kSegmentTokens && longest > kSegment;
  std::vector<Work> work;
  int64_t partialFloats = 0;
  for (size_t ti = 0; ti < tiles.size(); ++ti) {
    const Tile &tl = tiles[ti];
    // Segment s covers positions [s * kSegment, (s + 1) * kSegment) of the tile's range.
    const int64_t s0 = split ? tl.from / kSegment : 0, s1 = split ? tl.to / kSegment : 0;
    const int64_t segs = s1 - s0 + 1, rows = tl.count * group;
    // Segment-major: the items of one segment read one contiguous run of cache cells (every KV head's
    // slice of them), so the items a thread takes in turn stream memory instead of striding over it.
    for (int64_t s = s0; s <= s1; ++s)
      for (int64_t kh = 0; kh < a.hkv; ++kh) {
        Work w{ti, kh, split ? std::max(tl.from, s * kSegment) : tl.from,
               split ? std::min(tl.to, (s + 1) * kSegment - 1) : tl.to, -1};
        if (segs > 1) {
          w.partial = partialFloats;
          partialFloats += rows * (dv + 2); // the rows, then their (max, sum) pairs
        }
        work.push_back(w);
      }
  }
  std::vector<float> partial(static_cast<size_t>(partialFloats));
  const size_t scratchBytes = static_cast<size_t>(attn::itemScratchFloats(a)) * sizeof(float);
  auto body = [&](int64_t b, int64_t e, int thread) {
    float *scratch = static_cast<float *>(tg.threadScratch(thread, scratchBytes));
    for (int64_t i = b; i < e; ++i) {
      const Work &w = work[static_cast<size_t>(i)];
      const Tile &tl = tiles[w.tile];
      attn::Item it;
      it.first = tl.first, it.count = tl.count, it.kh = w.kh, it.from = w.from, it.to = w.to;
      if (w.partial < 0) {
        it.out = a.y + (tl.first * a.hq + w.kh * group) * dv;
        it.rowStride = a.hq * dv;
      } else {
        it.out = partial.data() + w.partial;
        it.rowStride = group * dv;
        it.finalize = false;
        it.ml = it.out + tl.count * group * dv;
      }
      kern.attend(a, it, scratch);
    }
  };
  // Waking the workers costs more than a small decode step (one token, a short context) saves.
  int64_t flops = 0;
  for (const Tile &tl : tiles)
    flops += tl.count * a.hq * (tl.to - tl.from + 1) * (a.dk + a.dv);
  if (flops < (1 << 16))
    body(0, static_cast<int64_t>(work.size()), 0);
  else
    tg.parallelFor(static_cast<int64_t>(work.size()), body);
  if (partial.empty())
    return;
  // Merge the segments of each split (tile, KV head), in segment order: a tile's items are its segments
  // in order, each holding the KV heads in order.
  for (size_t i = 0; i < work.size();) {
    size_t end = i;
    while (end < work.size() && work[end].tile == work[i].tile)
      ++end;
    const Tile &tl = tiles[work[i].tile];
    const int64_t rows = tl.count * group;
    const size_t hkv = static_cast<size_t>(a.hkv);
    for (size_t first = i; first < i + hkv && work[first].partial >= 0; ++first)
      for (int64_t m = 0; m < rows; ++m) {
        const int64_t r = m / group, h = work[first].kh * group + m % group;
        float *out = a.y + ((tl.first + r) * a.hq + h) * dv;
        float mx = -INFINITY, l = 0;
        for (size_t s = first; s < end; s += hkv) {
          const float *ml = partial.data() + work[s].partial + rows * dv + 2 * m;
          if (ml[1] > 0)
            mx = std::max(mx, ml[0]);
        }
        std::fill_n(out, dv, 0.0f);
        for (size_t s = first; s < end; s += hkv) {
          const float *seg = partial.data() + work[s].partial;
          const float *ml = seg + rows * dv + 2 * m;
          if (!(ml[1] > 0))
            continue;
          const float c = std::exp(ml[0] - mx);
          l += ml[1] * c;
          for (int64_t d = 0; d < dv; ++d)
            out[d] += c * seg[m * dv + d];
        }
        attn::finishRow(out, dv, mx, l, a.sinks ? a.sinks + h : nullptr);
      }
    i = end;
  }
}

} // namespace tpc::rt::cpu
