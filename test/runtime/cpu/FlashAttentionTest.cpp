//===- FlashAttentionTest.cpp - the CPU attention kernel against a double reference ===//
//
// runtime/cpu/Attention.h on random data, for every ISA this CPU has (scalar always; AVX2 and AVX-512 where
// present, so the AVX-512 kernel is checked on machines that have it): GQA, MQA and MHA, sliding windows,
// soft-caps, sinks, f16, f32, q8_0 and q4_0 caches (K and V of different types too), rings of window + batch
// positions wrapped several times, batches longer than the window, several sequences interleaved in one
// batch, and decode steps at long contexts (split into segments and merged). The cache is written the way the
// session appends (position p of sequence s in cell s * ctx + p mod ctx, later positions overwriting earlier
// ones); the reference reads the positions it needs from the logical sequences instead, so a kernel that read
// an overwritten cell, or a cell of another sequence (filled with other values), would not match.
//
// Tolerance: 2e-5 absolute on outputs of magnitude <= 1 (inputs uniform in [-1, 1]): f32 accumulation in
// blocks of 64 keys, an exp within 2 ulp of std::exp (checked here too), fused multiply-adds. The
// reference reads the values the cache holds (f16-rounded, or quantized and dequantized by the reference
// conversions of runtime/ggml/Quant.h), so a quantized cache meets the same tolerance: the kernels'
// in-register dequantization must give the reference's values (d * q, one rounding) exactly. What the
// quantization itself costs against the unrounded values is bounded separately (QuantizedCacheError).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Attention.h"
#include "runtime/cpu/attention/AttentionKernels.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include "test/common/TestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;

namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::Scalar};
  for (Isa i : {Isa::AVX2, Isa::AVX512})
    if (isaAvailable(i))
      out.push_back(i);
  return out;
}

/// One attention problem: sequences with their logical K/V rows, a batch of (seq, pos) tokens.
struct Problem {
  int64_t hq = 4, hkv = 2, dk = 16, dv = 16, window = 0, ctx = 64;
  float scale = 0.3f, softcap = 0;
  bool sinks = false;
  GGMLType typeK = GGMLType::F16, typeV = GGMLType::F16;
  int64_t sequences = 1;
  std::vector<int32_t> seq, pos; ///< the batch
  /// Positions each sequence holds when the batch runs (its tokens included): the cache holds them.
  std::vector<int64_t> length;
};

struct Data {
  std::vector<std::vector<float>> k, v; ///< per sequence: [length][hkv][d], rounded like the cache
  std::vector<float> q, sinks;
  std::vector<uint8_t> kc, vc; ///< the cache
};

/// `src` (n values of one head's row) as the cache holds them: rounded to f16, or quantized and dequantized.
void roundLikeCache(GGMLType type, float *x, int64_t n) {
  if (type == GGMLType::F16)
    for (int64_t i = 0; i < n; ++i)
      x[i] = fp16ToFp32(fp32ToFp16(x[i]));
  if (isQuantizedKvType(type)) {
    std::vector<uint8_t> blocks(kvRowBytes(type, n));
    quantizeRow(type, x, blocks.data(), n);
    dequantizeRow(type, blocks.data(), x, n);
  }
}

/// Writes n values (whole head rows of d values) into cache `c` at head row `row`, in the cache's type.
void storeRows(GGMLType type, std::vector<uint8_t> &c, int64_t row, int64_t d, const float *src, int64_t n) {
  uint8_t *dst = c.data() + row * kvRowBytes(type, d);
  if (type == GGMLType::F16)
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = fp32ToFp16(src[i]);
      std::memcpy(dst + i * 2, &h, 2);
    }
  else if (type == GGMLType::F32)
    std::memcpy(dst, src, n * 4);
  else
    quantizeRow(type, src, dst, n);
}

Data makeData(const Problem &p, uint32_t seed, bool unrounded = false) {
  Data d;
  const int64_t t = static_cast<int64_t>(p.pos.size());
  d.q = test::uniformFloats(t * p.hq * p.dk, seed);
  d.sinks = test::uniformFloats(p.hq, seed + 1);
  const int64_t cells = p.sequences * p.ctx;
  d.kc.resize(cells * p.hkv * kvRowBytes(p.typeK, p.dk));
  d.vc.resize(cells * p.hkv * kvRowBytes(p.typeV, p.dv));
  // Cells no position of a sequence reaches keep values no row may read.
  std::vector<float> junkK = test::uniformFloats(cells * p.hkv * p.dk, seed + 2), junkV = test::uniformFloats(cells * p.hkv * p.dv, seed + 3);
  for (float &x : junkK)
    x *= 50;
  for (float &x : junkV)
    x *= 50;
  storeRows(p.typeK, d.kc, 0, p.dk, junkK.data(), junkK.size());
  storeRows(p.typeV, d.vc, 0, p.dv, junkV.data(), junkV.size());
  for (int64_t s = 0; s < p.sequences; ++s) {
    const int64_t len = p.length[s];
    d.k.push_back(test::uniformFloats(len * p.hkv * p.dk, seed + 10 + uint32_t(s)));
    d.v.push_back(test::uniformFloats(len * p.hkv * p.dv, seed + 20 + uint32_t(s)));
    for (int64_t pp = 0; pp < len; ++pp) { // in order: a ring keeps the latest position of each cell
      const int64_t cell = s * p.ctx + pp % p.ctx;
      storeRows(p.typeK, d.kc, cell * p.hkv, p.dk, &d.k[s][pp * p.hkv * p.dk], p.hkv * p.dk);
      storeRows(p.typeV, d.vc, cell * p.hkv, p.dv, &d.v[s][pp * p.hkv * p.dv], p.hkv * p.dv);
    }
    if (unrounded) // the reference then reads what the cache was given, not what it holds
      continue;
    for (int64_t r = 0; r < len * p.hkv; ++r) {
      roundLikeCache(p.typeK, &d.k.back()[r * p.dk], p.dk);
      roundLikeCache(p.typeV, &d.v.back()[r * p.dv], p.dv);
    }
  }
  return d;
}

std::vector<float> reference(const Problem &p, const Data &d) {
  const int64_t t = static_cast<int64_t>(p.pos.size()), group = p.hq / p.hkv;
  std::vector<float> y(t * p.hq * p.dv);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < p.hq; ++h) {
      const int64_t s = p.seq[i], pi = p.pos[i], kh = h / group;
      const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pi - p.window + 1) : 0;
      std::vector<double> sc;
      for (int64_t j = lo; j <= pi; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < p.dk; ++e)
          dot += double(d.q[(i * p.hq + h) * p.dk + e]) * d.k[s][(j * p.hkv + kh) * p.dk + e];
        dot *= p.scale;
        if (p.softcap > 0)
          dot = p.softcap * std::tanh(dot / p.softcap);
        sc.push_back(dot);
      }
      double mx = p.sinks ? d.sinks[h] : -1e300;
      for (double x : sc)
        mx = std::max(mx, x);
      double den = p.sinks ? std::exp(d.sinks[h] - mx) : 0;
      for (double &x : sc)
        den += (x = std::exp(x - mx));
      for (int64_t e = 0; e < p.dv; ++e) {
        double acc = 0;
        for (size_t n = 0; n < sc.size(); ++n)
          acc += sc[n] * d.v[s][((lo + int64_t(n)) * p.hkv + kh) * p.dv + e];
        y[(i * p.hq + h) * p.dv + e] = static_cast<float>(acc / den);
      }
    }
  return y;
}

std::vector<float> run(const Problem &p, const Data &d, Isa isa, ThreadGroup &tg) {
  const int64_t t = static_cast<int64_t>(p.pos.size());
  std::vector<float> y(t * p.hq * p.dv, -7.0f);
  AttentionArgs a;
  a.q = d.q.data();
  a.y = y.data();
  a.t = t, a.hq = p.hq, a.hkv = p.hkv, a.dk = p.dk, a.dv = p.dv;
  a.pos = p.pos.data();
  a.seq = p.seq.data();
  a.k = d.kc.data(), a.v = d.vc.data();
  a.typeK = p.typeK, a.typeV = p.typeV;
  a.ctx = p.ctx;
  a.window = p.window;
  a.scale = p.scale, a.softcap = p.softcap;
  a.sinks = p.sinks ? d.sinks.data() : nullptr;
  flashAttention(a, tg, isa);
  return y;
}

float maxDiff(const std::vector<float> &a, const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float x = std::fabs(a[i] - b[i]);
    if (std::isnan(x))
      return x;
    m = std::max(m, x);
  }
  return m;
}

/// A batch of one sequence: `count` tokens from position `from`, which then holds from + count positions.
Problem oneSequence(int64_t from, int64_t count) {
  Problem p;
  for (int64_t i = 0; i < count; ++i)
    p.seq.push_back(0), p.pos.push_back(static_cast<int32_t>(from + i));
  p.length = {from + count};
  return p;
}

void expectMatches(const Problem &p, uint32_t seed, const std::string &what) {
  const Data d = makeData(p, seed);
  const std::vector<float> want = reference(p, d);
  for (int threads : {1, 3}) {
    ThreadGroup tg(threads);
    for (Isa isa : isas()) {
      const std::vector<float> got = run(p, d, isa, tg);
      EXPECT_LT(maxDiff(got, want), 2e-5f) << what << ", " << isaName(isa) << ", " << threads << " threads";
    }
  }
}

TEST(FlashAttention, HeadLayoutsWindowsSoftcapsSinksAndCacheTypes) {
  struct Layout {
    int64_t hq, hkv, dk, dv, window;
    float softcap;
    bool sinks;
    GGMLType typeK, typeV;
  };
  using T = GGMLType;
  const Layout layouts[] = {
      {4, 2, 16, 16, 0, 0, false, T::F32, T::F32},     // GQA
      {8, 1, 64, 48, 0, 0, false, T::F16, T::F16},     // MQA, Dk != Dv
      {3, 3, 8, 8, 0, 0, false, T::F16, T::F16},       // MHA
      {4, 2, 16, 16, 5, 0, false, T::F32, T::F32},     // sliding window
      {2, 1, 12, 12, 7, 5.0f, false, T::F16, T::F16},  // window + soft-cap, head dims off the vector width
      {4, 2, 8, 12, 0, 0, true, T::F32, T::F32},       // sinks
      {6, 2, 32, 32, 9, 2.0f, true, T::F16, T::F16},   // everything
      {4, 2, 32, 32, 0, 0, false, T::Q8_0, T::Q8_0},   // q8_0: one block per head row
      {8, 1, 128, 64, 0, 0, true, T::Q4_0, T::Q4_0},   // q4_0, MQA, Dk != Dv, several blocks per row
      {6, 2, 64, 64, 9, 2.0f, true, T::Q8_0, T::Q4_0}, // K and V of different types, window, soft-cap
      {4, 2, 32, 32, 0, 0, false, T::Q8_0, T::F16},    // quantized K, f16 V
      {4, 1, 32, 96, 5, 0, false, T::F32, T::Q8_0},    // f32 K, quantized V
  };
  int n = 0;
  for (const Layout &l : layouts) {
    // A prompt of 70 tokens (more than one key block), then a decode step after it.
    for (auto [from, count] : {std::pair<int64_t, int64_t>{0, 70}, {70, 1}}) {
      Problem p = oneSequence(from, count);
      p.hq = l.hq, p.hkv = l.hkv, p.dk = l.dk, p.dv = l.dv, p.window = l.window;
      p.softcap = l.softcap, p.sinks = l.sinks, p.typeK = l.typeK, p.typeV = l.typeV, p.ctx = 128;
      expectMatches(p, 100 + n, "layout " + std::to_string(n) + ", tokens from " + std::to_string(from));
    }
    ++n;
  }
}

TEST(FlashAttention, RingsWrappedSeveralTimesAndBatchesLongerThanTheWindow) {
  // Window 8, batches of at most 6 tokens: a ring of 14 cells per sequence. Positions 0..89 wrap it six
  // times; each batch continues the sequence after the last, and reads only what the ring still holds.
  // Quantized rings too: a cell's blocks are overwritten whole, like its f16 values.
  for (GGMLType type : {GGMLType::F16, GGMLType::Q8_0, GGMLType::Q4_0})
    for (int64_t batch : {int64_t(1), int64_t(6)}) {
      for (int64_t from = 0; from < 90; from += batch) {
        Problem p = oneSequence(from, batch);
        p.window = 8, p.ctx = 8 + 6, p.hq = 4, p.hkv = 1, p.dk = p.dv = 32, p.typeK = p.typeV = type;
        expectMatches(p, 300 + uint32_t(from),
                      std::string(ggmlTypeName(type)) + " ring, batch " + std::to_string(batch) + " at " +
                          std::to_string(from));
      }
    }
  // One batch of 40 tokens, five times the window, in a ring of window + batch.
  Problem p = oneSequence(0, 40);
  p.window = 8, p.ctx = 48, p.hq = 4, p.hkv = 2;
  expectMatches(p, 400, "batch of 40 over a window of 8");
  // The same batch after 100 positions: the ring has wrapped, the batch overwrites 40 of its 48 cells.
  Problem q = oneSequence(100, 40);
  q.window = 8, q.ctx = 48, q.hq = 4, q.hkv = 2;
  expectMatches(q, 401, "batch of 40 after 100 positions");
}

TEST(FlashAttention, InterleavedSequencesNeverSeeEachOther) {
  // Three sequences of different lengths in one batch, tokens interleaved and each sequence's tokens at
  // consecutive positions; decode-like singles and prompt-like runs, full cache and window ring. The other
  // sequences' cells hold other values: reading one would move the result far past the tolerance.
  for (auto [window, type] : {std::pair{int64_t(0), GGMLType::F16}, std::pair{int64_t(5), GGMLType::F16},
                              std::pair{int64_t(0), GGMLType::Q8_0}, std::pair{int64_t(5), GGMLType::Q4_0}}) {
    Problem p;
    p.sequences = 3, p.hq = 6, p.hkv = 2, p.window = window, p.typeK = p.typeV = type;
    p.dk = p.dv = type == GGMLType::F16 ? 16 : 32; // quantized rows are whole blocks
    p.ctx = window ? window + 12 : 64;
    p.length = {30, 9, 17};
    const int64_t firstNew[3] = {25, 0, 16}; // sequence 0: 5 new tokens, 1: a 9-token prompt, 2: one token
    std::vector<int64_t> next(firstNew, firstNew + 3);
    for (bool any = true; any;) {
      any = false;
      for (int32_t s = 0; s < 3; ++s)
        if (next[s] < p.length[s]) {
          p.seq.push_back(s), p.pos.push_back(static_cast<int32_t>(next[s]++));
          any = true;
        }
    }
    expectMatches(p, 500 + uint32_t(window),
                  std::string(ggmlTypeName(type)) + ": three interleaved sequences, window " +
                      std::to_string(window));
  }
}

TEST(FlashAttention, DecodeAtALongContextIsSplitAndMerged) {
  // Few tokens over a long range: the key range is cut into segments of 64 positions, run in parallel
  // and merged; with sinks and MQA (one KV head: without segments, a single work item).
  for (int64_t at : {int64_t(255), int64_t(256), int64_t(1000), int64_t(3000)}) {
    Problem p = oneSequence(at, 2);
    p.ctx = 4096, p.hq = 8, p.hkv = 1, p.dk = p.dv = 64, p.sinks = true;
    expectMatches(p, 600 + uint32_t(at), "decode at " + std::to_string(at));
  }
  for (GGMLType type : {GGMLType::Q8_0, GGMLType::Q4_0}) { // quantized caches: the segments read blocks alike
    Problem p = oneSequence(1000, 1);
    p.ctx = 2048, p.hq = 8, p.hkv = 2, p.dk = p.dv = 128, p.sinks = true, p.typeK = p.typeV = type;
    expectMatches(p, 650, std::string(ggmlTypeName(type)) + " decode at 1000");
  }
  Problem w = oneSequence(2000, 3); // a window inside a long context: the early blocks are skipped
  w.ctx = 2048 + 8, w.window = 300, w.hq = 4, w.hkv = 2;
  expectMatches(w, 700, "window 300 at 2000");
}

TEST(FlashAttention, GqaDecodeAtALongContextIsTheSameOnAnyThreadsAndSplit) {
  // Several KV heads x segments (items ordered segment by segment, merged per KV head): within tolerance
  // of the reference, bit for bit the same on 1, 2 and 3 threads, and KV heads 2..3 alone (a 2-device
  // split's second device) give the bits one device gives them.
  Problem p = oneSequence(1500, 1);
  p.ctx = 2048, p.hq = 16, p.hkv = 4, p.dk = p.dv = 64; // f16: the slicing below takes 2 bytes a value
  const Data d = makeData(p, 900);
  const std::vector<float> want = reference(p, d);
  const int64_t half = 8 * 64; // floats of heads 8..15, the second half of the one token's row
  for (Isa isa : isas()) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      ThreadGroup tg(threads);
      const std::vector<float> got = run(p, d, isa, tg);
      EXPECT_LT(maxDiff(got, want), 2e-5f) << isaName(isa) << ", " << threads << " threads";
      if (first.empty())
        first = got;
      else
        EXPECT_EQ(got, first) << isaName(isa) << ": " << threads << " threads changed the bits";
    }
    Problem part = p;
    part.hq = 8, part.hkv = 2;
    Data dp = d;
    dp.q.assign(d.q.begin() + half, d.q.end());
    dp.kc.clear(), dp.vc.clear();
    for (int64_t c = 0; c < p.ctx; ++c) { // the cache rows of KV heads 2..3
      dp.kc.insert(dp.kc.end(), d.kc.begin() + (c * 4 + 2) * 64 * 2, d.kc.begin() + (c * 4 + 4) * 64 * 2);
      dp.vc.insert(dp.vc.end(), d.vc.begin() + (c * 4 + 2) * 64 * 2, d.vc.begin() + (c * 4 + 4) * 64 * 2);
    }
    ThreadGroup tg(2);
    const std::vector<float> yp = run(part, dp, isa, tg);
    EXPECT_TRUE(std::equal(yp.begin(), yp.end(), first.begin() + half)) << isaName(isa) << ": split heads differ";
  }
}

TEST(FlashAttention, OneKvHeadDecodeIsSegmentedTheSameOnAnyThreads) {
  // Gemma 3's decode shape (4 query heads on one KV head): short ranges of 65..200 positions (2..4
  // segments of 64), a window of 512 inside a longer context and a whole context of 3000 (47 segments).
  // Within tolerance of the reference and bit for bit the same on 1, 2 and 3 threads: the segments
  // depend on the positions alone, never on how the items were shared out.
  struct Case {
    int64_t at, window;
  };
  for (const Case c : {Case{64, 0}, Case{130, 0}, Case{199, 0}, Case{1800, 512}, Case{3000, 0}}) {
    Problem p = oneSequence(c.at, 1);
    p.ctx = 3072, p.hq = 4, p.hkv = 1, p.dk = p.dv = 64, p.window = c.window, p.sinks = true;
    const Data d = makeData(p, 950 + uint32_t(c.at));
    const std::vector<float> want = reference(p, d);
    for (Isa isa : isas()) {
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        ThreadGroup tg(threads);
        const std::vector<float> got = run(p, d, isa, tg);
        EXPECT_LT(maxDiff(got, want), 2e-5f) << "at " << c.at << ", " << isaName(isa) << ", " << threads << " threads";
        if (first.empty())
          first = got;
        else
          EXPECT_EQ(got, first) << "at " << c.at << ", " << isaName(isa) << ": " << threads << " threads changed the bits";
      }
    }
  }
}

TEST(FlashAttention, QuantizedCacheError) {
  // Against the values the cache was given (not the ones it holds): what q8_0 costs, bounded from its
  // format. Inputs are uniform in [-1, 1], so a block's max |x| is at most 1 and a q8_0 value is off by at
  // most half a step (1/254) plus the f16 rounding of the scale (127 steps x 2^-11 of a step: 1/2048),
  // e <= 0.0044. A score (scale 0.3, dk 64, |q| <= 1) then moves by at most 0.3 * 64 * 0.0044 = 0.085, a
  // softmax weight by a factor within exp(+-2 * 0.085) (|dp| <= 0.19 p), so an output (|v| <= 1) by at
  // most 0.19 + 0.0044. That is a worst case (every error aligned); on random data the errors cancel
  // (about sqrt(64) in a score), which the rms check (0.01, 50 times below the worst case over 8) holds it
  // to. An f16 cache's values are off by at most 2^-12 of a value (1/8 of q8_0's step for |x| ~ 1/2, its
  // mean): q8_0 must move the result clearly more than f16 does, or the cache was not quantized.
  Problem p = oneSequence(0, 24);
  p.ctx = 64, p.hq = 4, p.hkv = 2, p.dk = p.dv = 64, p.scale = 0.3f;
  ThreadGroup tg(2);
  for (Isa isa : isas()) {
    double rms[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      p.typeK = p.typeV = i == 0 ? GGMLType::F16 : GGMLType::Q8_0;
      const Data d = makeData(p, 990, /*unrounded=*/true);
      const std::vector<float> want = reference(p, d), got = run(p, d, isa, tg);
      double sq = 0;
      for (size_t j = 0; j < got.size(); ++j)
        sq += double(got[j] - want[j]) * (got[j] - want[j]);
      rms[i] = std::sqrt(sq / double(got.size()));
      EXPECT_LT(maxDiff(got, want), 0.19 + 0.0044) << ggmlTypeName(p.typeK) << ", " << isaName(isa);
    }
    std::printf("[ q8_0     ] %s: rms against the unrounded values: f16 %.3g, q8_0 %.3g\n", isaName(isa),
                rms[0], rms[1]);
    EXPECT_LT(rms[1], 0.01) << isaName(isa);
    EXPECT_GT(rms[1], 4 * rms[0]) << isaName(isa) << ": q8_0 moved the result no more than f16 (rms "
                                  << rms[0] << "): is the cache still f16?";
  }
}

TEST(FlashAttention, ThreadsGetContiguousRunsOfAboutEqualCost) {
  // The decode items of a window cut at both ends (a short first and last segment) and a prompt's tiles
  // (each sees more keys than the one before): equal item counts would leave one thread most of the work.
  const std::vector<int64_t> window = {151, 256, 105};
  EXPECT_EQ(attn::balancedChunks(window, 2), (std::vector<size_t>{0, 1, 3}));
  std::vector<int64_t> prompt;
  for (int64_t i = 1; i <= 32; ++i)
    prompt.push_back(i * 16);
  for (int parts : {2, 3, 4, 7}) {
    const std::vector<size_t> b = attn::balancedChunks(prompt, parts);
    ASSERT_EQ(b.size(), size_t(parts) + 1);
    EXPECT_EQ(b.front(), 0u);
    EXPECT_EQ(b.back(), prompt.size());
    int64_t total = 0;
    for (int64_t c : prompt)
      total += c;
    for (int c = 0; c < parts; ++c) {
      ASSERT_LE(b[c], b[c + 1]);
      int64_t sum = 0;
      for (size_t i = b[c]; i < b[c + 1]; ++i)
        sum += prompt[i];
      // Each run is its share of the total give or take the largest item.
      EXPECT_LE(std::abs(sum - total / parts), 32 * 16) << parts << " parts, run " << c;
    }
  }
  // More parts than items: the extra runs are empty, no item is lost.
  EXPECT_EQ(attn::balancedChunks({5, 5}, 4), (std::vector<size_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(attn::balancedChunks({}, 2), (std::vector<size_t>{0, 0, 0}));
}

TEST(FlashAttention, AHeadsResultDoesNotDependOnTheHeadsBesideIt) {
  // A split plan gives a device some of the query heads (MQA: the KV head mirrored): each head must come
  // out bit for bit as on one device, so that splits change nothing but the matmuls' summation order.
  Problem all = oneSequence(0, 37);
  all.hq = 8, all.hkv = 1, all.dk = all.dv = 32, all.window = 11, all.ctx = 64;
  const Data d = makeData(all, 800);
  ThreadGroup tg(2);
  for (Isa isa : isas()) {
    const std::vector<float> y = run(all, d, isa, tg);
    Problem part = all;
    part.hq = 3; // heads 5..7 alone
    Data dp = d;
    dp.q.clear();
    for (int64_t i = 0; i < 37; ++i)
      dp.q.insert(dp.q.end(), d.q.begin() + (i * 8 + 5) * 32, d.q.begin() + (i * 8 + 8) * 32);
    const std::vector<float> yp = run(part, dp, isa, tg);
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t e = 0; e < 32; ++e)
          ASSERT_EQ(yp[(i * 3 + h) * 32 + e], y[(i * 8 + 5 + h) * 32 + e]) << isaName(isa) << " token " << i;
  }
}

TEST(FlashAttention, VectorisedExpIsWithinTwoUlpOfStdExp) {
  std::vector<float> base;
  for (float x = -90.0f; x <= 0.0f; x += 0.0137f)
    base.push_back(x);
  base.push_back(-0.0f);
  base.push_back(-1e-8f);
  for (Isa isa : isas()) {
    std::vector<float> x = base;
    const float sum = expShiftSum(x.data(), static_cast<int64_t>(x.size()), 0.0f, isa);
    double want = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(double(base[i]));
      want += e;
      if (base[i] < -87.3f) { // below the normal range: 0 or a denormal
        EXPECT_LE(x[i], 1.25e-38f) << isaName(isa) << " x=" << base[i];
        continue;
      }
      EXPECT_LE(std::fabs(x[i] - e), 2.5e-7 * e) << isaName(isa) << " x=" << base[i];
    }
    EXPECT_NEAR(sum, want, 1e-5 * want) << isaName(isa);
  }
}

} // namespace
