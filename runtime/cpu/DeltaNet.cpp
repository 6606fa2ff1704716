//===- DeltaNet.cpp - Gated DeltaNet and causal conv: sequences, threads, reference ===//
//
// The drivers of DeltaNet.h. Both group the call's tokens by sequence first (a sequence's tokens may be
// interleaved with other sequences' tokens, but keep their order), then run independent work items over
// the thread group: (sequence, value head) pairs for the delta rule, (sequence, channel block) pairs for
// the conv. An item owns its slice of the state and of the outputs and computes it the same way whichever
// thread runs it, so the result does not depend on the thread count. Items are claimed dynamically in
// order of decreasing length: a batch that mixes one prefill with many decode steps keeps every thread
// busy until the end. Which form a delta-rule item runs in is chosen per item from its length and
// whether its sequence starts at position 0 (DeltaNet.h, kDeltaNetChunkMin).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/DeltaNet.h"

#include "runtime/cpu/deltanet/DeltaNetKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::rt::cpu {

namespace {

const dn::Kernels &kernelsFor(Isa isa) {
  static const dn::Kernels scalar = dn::scalarKernels();
  static const dn::Kernels avx2 = isaAvailable(Isa::AVX2) ? dn::avx2Kernels() : scalar;
  static const dn::Kernels avx512 = isaAvailable(Isa::AVX512) ? dn::avx512Kernels() : avx2;
  if ((isa == Isa::AVX512 || isa == Isa::AVX512VNNI) && isaAvailable(Isa::AVX512))
    return avx512;
  if (isa != Isa::Scalar && isaAvailable(Isa::AVX2))
    return avx2;
  return scalar;
}

/// The call's tokens grouped by sequence: sequence ids in order of first appearance, each with its token
/// indices in batch order, and whether it starts from a zero state.
struct Groups {
  std::vector<int32_t> id;
  std::vector<int64_t> start; ///< tokens of group i: tok[start[i] .. start[i + 1])
  std::vector<int64_t> tok;
  std::vector<char> zero;
  int64_t size() const { return static_cast<int64_t>(id.size()); }
  int64_t count(int64_t i) const { return start[i + 1] - start[i]; }
};

Groups groupTokens(int64_t t, const int32_t *pos, const int32_t *seq, int32_t sequences, const char *what) {
  if (!pos && t > 0)
    throw std::invalid_argument(std::string(what) + ": positions are required");
  Groups g;
  std::vector<int64_t> slot; // sequence id -> group index + 1
  std::vector<int64_t> count;
  for (int64_t i = 0; i < t; ++i) {
    const int32_t s = seq ? seq[i] : 0;
    if (s < 0 || s >= sequences)
      throw std::invalid_argument(std::string(what) + ": token " + std::to_string(i) + " is in sequence " +
                                  std::to_string(s) + ", the state holds " + std::to_string(sequences));
    if (static_cast<size_t>(s) >= slot.size())
      slot.resize(static_cast<size_t>(s) + 1, 0);
    if (!slot[s]) {
      g.id.push_back(s);
      g.zero.push_back(pos[i] == 0);
      count.push_back(0);
      slot[s] = g.size();
    }
    ++count[slot[s] - 1];
  }
  g.start.assign(g.id.size() + 1, 0);
  for (size_t i = 0; i < count.size(); ++i)
    g.start[i + 1] = g.start[i] + count[i];
  g.tok.resize(static_cast<size_t>(t));
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (int64_t i = 0; i < t; ++i)
    g.tok[fill[slot[seq ? seq[i] : 0] - 1]++] = i;
  return g;
}

/// Group indices longest first (ties in order of appearance): the order items are claimed in.
std::vector<int64_t> longestFirst(const Groups &g) {
  std::vector<int64_t> order(static_cast<size_t>(g.size()));
  for (int64_t i = 0; i < g.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return g.count(x) > g.count(y); });
  return order;
}

void checkDeltaNet(const DeltaNetArgs &a) {
  if (a.t < 0 || a.hk <= 0 || a.hv <= 0 || a.dk <= 0 || a.dv <= 0 || a.hv % a.hk != 0)
    throw std::invalid_argument("deltaNet: bad shape (hk " + std::to_string(a.hk) + ", hv " +
                                std::to_string(a.hv) + ", dk " + std::to_string(a.dk) + ", dv " +
                                std::to_string(a.dv) + ")");
}

} // namespace

void deltaNet(const DeltaNetArgs &a, ThreadGroup &tg, Isa isa, DeltaNetPath path) {
  checkDeltaNet(a);
  if (a.t == 0)
    return;
  const Groups g = groupTokens(a.t, a.pos, a.seq, a.sequences, "deltaNet");
  const std::vector<int64_t> order = longestFirst(g);
  const dn::Kernels &kern = kernelsFor(isa);
  const int64_t hv = a.hv, stateSize = a.dk * a.dv;
  tg.parallelDynamic(g.size() * hv, [&](int64_t unit, int thread) {
    const int64_t gi = order[static_cast<size_t>(unit / hv)], h = unit % hv, n = g.count(gi);
    dn::Head hd;
    hd.a = &a;
    hd.tok = g.tok.data() + g.start[gi];
    hd.h = h;
    hd.state = a.state + (g.id[gi] * hv + h) * stateSize;
    hd.zeroState = g.zero[gi];
    if (hd.zeroState)
      std::fill(hd.state, hd.state + stateSize, 0.0f);
    // Tokens [0, chunked) in the chunked form, the rest by the recurrence (see kDeltaNetChunkMin).
    int64_t chunked = 0;
    if (path == DeltaNetPath::Chunked)
      chunked = n;
    else if (path == DeltaNetPath::Auto && hd.zeroState && n >= kDeltaNetChunkMin)
      chunked = std::min(n, dn::kChunk);
    const int64_t floats = std::max(chunked > 0 ? dn::chunkedScratchFloats(a) : 0,
                                    chunked < n ? dn::recurrentScratchFloats(a, n - chunked) : 0);
    float *scratch =
        static_cast<float *>(tg.threadScratch(thread, sizeof(float) * static_cast<size_t>(floats)));
    if (chunked > 0) {
      hd.n = chunked;
      kern.chunked(hd, scratch);
    }
    if (chunked < n) {
      hd.tok += chunked;
      hd.n = n - chunked;
      hd.zeroState = hd.zeroState && chunked == 0;
      kern.recurrent(hd, scratch);
    }
  });
}

void deltaNet(const DeltaNetArgs &a, ThreadGroup &tg) { deltaNet(a, tg, activeIsa(), DeltaNetPath::Auto); }

void deltaNetReference(const DeltaNetArgs &a) {
  checkDeltaNet(a);
  const Groups g = groupTokens(a.t, a.pos, a.seq, a.sequences, "deltaNetReference");
  const int64_t hk = a.hk, hv = a.hv, dk = a.dk, dv = a.dv;
  std::vector<double> S(static_cast<size_t>(dk * dv)), d(static_cast<size_t>(dv));
  for (int64_t gi = 0; gi < g.size(); ++gi)
    for (int64_t h = 0; h < hv; ++h) {
      float *state = a.state + (g.id[gi] * hv + h) * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i)
        S[i] = g.zero[gi] ? 0.0 : state[i];
      for (int64_t n = 0; n < g.count(gi); ++n) {
        const int64_t t = g.tok[g.start[gi] + n];
        const float *k = a.k + (t * hk + h % hk) * dk, *q = a.q + (t * hk + h % hk) * dk;
        const float *v = a.v + (t * hv + h) * dv;
        float *y = a.y + (t * hv + h) * dv;
        const double decay = std::exp(double(a.g[t * hv + h])), beta = a.beta[t * hv + h];
        for (double &s : S)
          s *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double kS = 0;
          for (int64_t i = 0; i < dk; ++i)
            kS += double(k[i]) * S[i * dv + j];
          d[j] = beta * (double(v[j]) - kS);
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j)
            S[i * dv + j] += double(k[i]) * d[j];
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i)
            acc += double(a.scale) * double(q[i]) * S[i * dv + j];
          y[j] = static_cast<float>(acc);
        }
      }
      for (int64_t i = 0; i < dk * dv; ++i)
        state[i] = static_cast<float>(S[i]);
    }
}

//===----------------------------------------------------------------------===//
// ssmConv
//===----------------------------------------------------------------------===//

namespace {
/// Channels per conv work item: the item's weights (transposed to [k, block]) and a row of each of its
/// k inputs stay in L1.
constexpr int64_t kConvBlock = 256;
/// The widest conv kernel ssmConv takes (the models' is 4).
constexpr int64_t kMaxConvTaps = 64;
/// Multiply-adds below which ssmConv runs on the calling thread (one decode token of a 64k-channel layer).
constexpr int64_t kConvSerialWork = 1 << 18;
} // namespace

void ssmConv(const SsmConvArgs &a, ThreadGroup &tg) {
  if (a.t < 0 || a.c <= 0 || a.k < 1 || a.k > kMaxConvTaps)
    throw std::invalid_argument("ssmConv: bad shape (c " + std::to_string(a.c) + ", k " +
                                std::to_string(a.k) + ")");
  if (a.t == 0)
    return;
  const Groups g = groupTokens(a.t, a.pos, a.seq, a.sequences, "ssmConv");
  const std::vector<int64_t> order = longestFirst(g);
  const int64_t C = a.c, K = a.k, R = K - 1, blocks = (C + kConvBlock - 1) / kConvBlock;
  const dn::ConvRowFn convRow = kernelsFor(activeIsa()).convRow;
  auto unitFn = [&](int64_t unit, int thread) {
    const int64_t gi = order[static_cast<size_t>(unit / blocks)], c0 = unit % blocks * kConvBlock;
    const int64_t cn = std::min(kConvBlock, C - c0), n = g.count(gi);
    const int64_t *tok = g.tok.data() + g.start[gi];
    float *state = a.convState + g.id[gi] * R * C + c0;
    if (g.zero[gi])
      for (int64_t r = 0; r < R; ++r)
        std::fill(state + r * C, state + r * C + cn, 0.0f);
    float *wt = static_cast<float *>(tg.threadScratch(thread, sizeof(float) * static_cast<size_t>(K * cn)));
    for (int64_t c = 0; c < cn; ++c)
      for (int64_t j = 0; j < K; ++j)
        wt[j * cn + c] = a.w[(c0 + c) * K + j];
    // Row m of the sequence's inputs xs = [state rows; x rows of its tokens], at this item's channels.
    auto xs = [&](int64_t m) -> const float * { return m < R ? state + m * C : a.x + tok[m - R] * C + c0; };
    const float *rows[kMaxConvTaps];
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < K; ++j)
        rows[j] = xs(i + j);
      convRow(rows, wt, a.y + tok[i] * C + c0, cn, K);
    }
    // The new state: xs rows n .. n + R - 1. Row r reads row n + r > r, not yet overwritten.
    for (int64_t r = 0; r < R; ++r) {
      const float *src = xs(n + r);
      if (src != state + r * C)
        std::memmove(state + r * C, src, sizeof(float) * static_cast<size_t>(cn));
    }
  };
  // A decode step's conv (a token per sequence: C x K multiply-adds each) is a few microseconds of work,
  // less than waking the group costs: the caller runs it alone (Qwen3.5-35B's 8192 channels, decode on the
  // 2-core VM: 150 -> 110 us a call in `tpc run --profile`).
  const int64_t units = static_cast<int64_t>(g.size()) * blocks;
  if (a.t * C * K <= kConvSerialWork)
    for (int64_t u = 0; u < units; ++u)
      unitFn(u, 0);
  else
    tg.parallelDynamic(units, unitFn);
}

} // namespace tpc::rt::cpu
