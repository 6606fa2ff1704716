//===- DeltaNetTest.cpp - gated delta rule and causal conv against references ===//
//
// runtime/cpu/DeltaNet.h on random data, for every ISA this CPU has (scalar always; AVX2 and AVX-512 where
// present) and every path of deltaNet (all chunked, all recurrence, and Auto: a zero-state run's first
// chunk chunked, the rest by the recurrence). Inputs look like the model's: q and k L2-normalised
// per head, v uniform in [-1, 1], beta in (0, 1), log-decays near 0 (g ~ -1e-4), moderate (-1..0) and
// strong (g ~ -5, -20, where exp(g)^64 underflows: a kernel that formed exp(-G) would overflow).
//
// Tolerance: |y - y_ref| <= 2e-5 * max(1, max |y_ref|) and the same for the final state (float accumulation
// against the double reference over up to 200 tokens; the chunked form's (I + A)^-1 and the exp of
// G_t - G_s add a few ulp per term; the largest error measured over every case here is 7e-7).
//
// Sequences: a call's tokens are grouped by sequence whatever their order, so the interleaving tests ask
// for bit-identical results (a head's arithmetic sees the same tokens in the same order), as do the
// thread-count tests. The conv is checked against its defining sum over each sequence's whole input
// history, across calls shorter than its K - 1 state rows.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/DeltaNet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

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

const DeltaNetPath kPaths[] = {DeltaNetPath::Chunked, DeltaNetPath::Recurrent, DeltaNetPath::Auto};

const char *pathName(DeltaNetPath p) {
  return p == DeltaNetPath::Chunked ? "chunked" : p == DeltaNetPath::Recurrent ? "recurrent" : "auto";
}

/// One delta-rule problem: inputs of t tokens, their positions and sequences, and the state slots.
struct Problem {
  int64_t hk = 1, hv = 1, dk = 16, dv = 16, t = 0;
  int32_t sequences = 1;
  float scale = 0.25f;
  std::vector<float> q, k, v, g, beta, state;
  std::vector<int32_t> pos, seq;

  DeltaNetArgs args(float *y) {
    DeltaNetArgs a;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data(), a.y = y;
    a.t = t, a.hk = hk, a.hv = hv, a.dk = dk, a.dv = dv, a.scale = scale;
    a.pos = pos.data(), a.seq = seq.data(), a.state = state.data(), a.sequences = sequences;
    return a;
  }
};

/// Decay regimes: g uniform in [lo, hi].
struct Decay {
  float lo, hi;
  const char *name;
};
const Decay kDecays[] = {{-2e-4f, 0.0f, "near0"},
                         {-1.0f, 0.0f, "moderate"},
                         {-6.0f, -4.0f, "strong5"},
                         {-21.0f, -19.0f, "strong20"}};

/// Fills the token inputs of p (t tokens) with the model's kind of values.
void fillInputs(Problem &p, uint32_t seed, Decay decay) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), b(0.02f, 0.98f), gd(decay.lo, decay.hi);
  auto normalised = [&](std::vector<float> &x, int64_t rows, int64_t d) {
    x.resize(static_cast<size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r) {
      double n = 0;
      for (int64_t i = 0; i < d; ++i)
        n += double(x[r * d + i] = u(rng)) * x[r * d + i];
      for (int64_t i = 0; i < d; ++i)
        x[r * d + i] = static_cast<float>(x[r * d + i] / std::sqrt(n));
    }
  };
  normalised(p.q, p.t * p.hk, p.dk);
  normalised(p.k, p.t * p.hk, p.dk);
  p.v.resize(static_cast<size_t>(p.t * p.hv * p.dv));
  for (float &x : p.v)
    x = u(rng);
  p.g.resize(static_cast<size_t>(p.t * p.hv));
  p.beta.resize(p.g.size());
  for (float &x : p.g)
    x = gd(rng);
  for (float &x : p.beta)
    x = b(rng);
}

/// A state of `sequences` slots filled with values a model's state could hold.
std::vector<float> randomState(const Problem &p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> s(static_cast<size_t>(p.sequences * p.hv * p.dk * p.dv));
  for (float &x : s)
    x = u(rng);
  return s;
}

double maxAbs(const std::vector<float> &a) {
  double m = 0;
  for (float x : a)
    m = std::max(m, double(std::fabs(x)));
  return m;
}

/// max |a - b| / max(1, max |b|); NaN anywhere counts as infinite.
double relErr(const std::vector<float> &a, const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m / std::max(1.0, maxAbs(b));
}

constexpr double kTol = 2e-5;

struct Result {
  std::vector<float> y, state;
};

Result runKernel(Problem p, ThreadGroup &tg, Isa isa, DeltaNetPath path) {
  Result r;
  r.y.assign(static_cast<size_t>(p.t * p.hv * p.dv), -7.0f);
  deltaNet(p.args(r.y.data()), tg, isa, path);
  r.state = p.state;
  return r;
}

Result runReference(Problem p) {
  Result r;
  r.y.assign(static_cast<size_t>(p.t * p.hv * p.dv), -7.0f);
  deltaNetReference(p.args(r.y.data()));
  r.state = p.state;
  return r;
}

/// One sequence of `len` tokens starting at `pos0` (a random stored state when pos0 > 0).
Problem oneSequence(int64_t hk, int64_t hv, int64_t dk, int64_t dv, int64_t len, int32_t pos0, Decay decay,
                    uint32_t seed) {
  Problem p;
  p.hk = hk, p.hv = hv, p.dk = dk, p.dv = dv, p.t = len;
  p.scale = 1.0f / std::sqrt(float(dk));
  fillInputs(p, seed, decay);
  for (int64_t i = 0; i < len; ++i) {
    p.pos.push_back(pos0 + int32_t(i));
    p.seq.push_back(0);
  }
  p.state = randomState(p, seed + 99);
  return p;
}

//===----------------------------------------------------------------------===//
// deltaNet against the reference
//===----------------------------------------------------------------------===//

struct Shape {
  int64_t hk, hv, dk, dv;
};

TEST(DeltaNet, MatchesReference) {
  const Shape shapes[] = {{2, 4, 64, 64}, {3, 6, 32, 48}, {1, 1, 128, 128}, {1, 2, 16, 10}};
  const int64_t lengths[] = {1, 2, 63, 64, 65, 130, 200};
  ThreadGroup tg(2);
  double worst = 0;
  uint32_t seed = 1;
  for (const Shape &sh : shapes)
    for (int64_t len : lengths)
      for (const Decay &decay : kDecays)
        for (int32_t pos0 : {0, 7}) {
          // The long dk = dv = 128 runs cost the double reference most: only part of them.
          if (sh.dk == 128 && len > 65 && decay.lo > -2)
            continue;
          const Problem p = oneSequence(sh.hk, sh.hv, sh.dk, sh.dv, len, pos0, decay, seed++);
          const Result ref = runReference(p);
          for (Isa isa : isas())
            for (DeltaNetPath path : kPaths) {
              SCOPED_TRACE(testing::Message()
                           << "hk " << sh.hk << " hv " << sh.hv << " dk " << sh.dk << " dv " << sh.dv
                           << " len " << len << " decay " << decay.name << " pos0 " << pos0 << " isa "
                           << isaName(isa) << " path " << pathName(path));
              const Result r = runKernel(p, tg, isa, path);
              const double ey = relErr(r.y, ref.y), es = relErr(r.state, ref.state);
              EXPECT_LE(ey, kTol);
              EXPECT_LE(es, kTol);
              worst = std::max({worst, ey, es});
            }
        }
  std::printf("worst relative error against the reference: %.3g\n", worst);
}

// The public entry point (activeIsa, the default threshold) runs a model-sized head correctly too.
TEST(DeltaNet, DefaultEntryModelShape) {
  Problem p = oneSequence(2, 4, 128, 128, 96, 3, kDecays[1], 77);
  const Result ref = runReference(p);
  std::vector<float> y(static_cast<size_t>(p.t * p.hv * p.dv));
  ThreadGroup tg(2);
  deltaNet(p.args(y.data()), tg);
  EXPECT_LE(relErr(y, ref.y), kTol);
  EXPECT_LE(relErr(p.state, ref.state), kTol);
}

//===----------------------------------------------------------------------===//
// State across calls, sequences, threads
//===----------------------------------------------------------------------===//

/// Tokens [from, from + n) of p as a problem of their own (same state slots).
Problem slice(const Problem &p, int64_t from, int64_t n) {
  Problem s = p;
  s.t = n;
  auto cut = [&](std::vector<float> &x, const std::vector<float> &src, int64_t row) {
    x.assign(src.begin() + from * row, src.begin() + (from + n) * row);
  };
  cut(s.q, p.q, p.hk * p.dk);
  cut(s.k, p.k, p.hk * p.dk);
  cut(s.v, p.v, p.hv * p.dv);
  cut(s.g, p.g, p.hv);
  cut(s.beta, p.beta, p.hv);
  s.pos.assign(p.pos.begin() + from, p.pos.begin() + from + n);
  s.seq.assign(p.seq.begin() + from, p.seq.begin() + from + n);
  return s;
}

TEST(DeltaNet, StateCarriedAcrossCalls) {
  ThreadGroup tg(2);
  for (const Decay &decay : {kDecays[0], kDecays[1], kDecays[2]})
    for (Isa isa : isas())
      for (DeltaNetPath path : kPaths) {
        SCOPED_TRACE(testing::Message()
                     << "decay " << decay.name << " isa " << isaName(isa) << " path " << pathName(path));
        const Problem whole = oneSequence(2, 4, 32, 48, 150, 0, decay, 11);
        const Result one = runKernel(whole, tg, isa, path), ref = runReference(whole);
        // The same tokens in calls of 1, 37, 64 and 48, the state carried by the kernel.
        std::vector<float> state = whole.state, y;
        int64_t from = 0;
        for (int64_t n : {1, 37, 64, 48}) {
          Problem part = slice(whole, from, n);
          part.state = state;
          const Result r = runKernel(part, tg, isa, path);
          y.insert(y.end(), r.y.begin(), r.y.end());
          state = r.state;
          from += n;
        }
        ASSERT_EQ(from, whole.t);
        EXPECT_LE(relErr(y, one.y), kTol);
        EXPECT_LE(relErr(state, one.state), kTol);
        EXPECT_LE(relErr(y, ref.y), kTol);
        EXPECT_LE(relErr(state, ref.state), kTol);
      }
}

/// A batch of sequence 0 (starts at 0 over a garbage state), sequence 1 (continues at 10 from its stored
/// state) and sequence 2 (not in the batch), tokens mixed in a random order.
struct Mixed {
  Problem a, b, batch;
  std::vector<int64_t> fromA; ///< batch token i is a's token fromA[i], or b's token -1 - fromA[i]
};

Mixed mixed(int64_t lenA, int64_t lenB, Decay decay, uint32_t seed) {
  Mixed m;
  m.a = oneSequence(2, 4, 32, 32, lenA, 0, decay, seed);
  m.b = oneSequence(2, 4, 32, 32, lenB, 10, decay, seed + 1);
  Problem &p = m.batch;
  p = m.a;
  p.sequences = 3;
  p.state = randomState(p, seed + 2);
  for (int64_t i = 0; i < p.hv * p.dk * p.dv; ++i) // sequence 0's stored state: must be ignored
    p.state[i] = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(seed + 3);
  std::vector<int64_t> order;
  order.insert(order.end(), static_cast<size_t>(lenA), 1);
  order.insert(order.end(), static_cast<size_t>(lenB), 0);
  std::shuffle(order.begin(), order.end(), rng);
  p.t = lenA + lenB;
  p.q.clear(), p.k.clear(), p.v.clear(), p.g.clear(), p.beta.clear(), p.pos.clear(), p.seq.clear();
  int64_t ia = 0, ib = 0;
  for (int64_t fromA : order) {
    const Problem &src = fromA ? m.a : m.b;
    const int64_t i = fromA ? ia++ : ib++;
    auto take = [&](std::vector<float> &x, const std::vector<float> &s, int64_t row) {
      x.insert(x.end(), s.begin() + i * row, s.begin() + (i + 1) * row);
    };
    take(p.q, src.q, p.hk * p.dk);
    take(p.k, src.k, p.hk * p.dk);
    take(p.v, src.v, p.hv * p.dv);
    take(p.g, src.g, p.hv);
    take(p.beta, src.beta, p.hv);
    p.pos.push_back(src.pos[i]);
    p.seq.push_back(fromA ? 0 : 1);
    m.fromA.push_back(fromA ? i : -1 - i);
  }
  // b runs alone from the batch's stored state of sequence 1.
  const int64_t slot = p.hv * p.dk * p.dv;
  m.b.state.assign(p.state.begin() + slot, p.state.begin() + 2 * slot);
  return m;
}

TEST(DeltaNet, InterleavedSequencesEqualRunsAlone) {
  ThreadGroup tg(3);
  for (Isa isa : isas())
    for (DeltaNetPath path : kPaths)
      for (auto lens : {std::pair<int64_t, int64_t>{70, 45}, {1, 1}, {130, 3}}) {
        SCOPED_TRACE(testing::Message() << "isa " << isaName(isa) << " path " << pathName(path) << " lengths "
                                        << lens.first << ", " << lens.second);
        const Mixed m = mixed(lens.first, lens.second, kDecays[1], 21);
        const Result batch = runKernel(m.batch, tg, isa, path);
        const Result a = runKernel(m.a, tg, isa, path), b = runKernel(m.b, tg, isa, path);
        const int64_t row = m.a.hv * m.a.dv, slot = m.a.hv * m.a.dk * m.a.dv;
        // Bit-identical rows: the batch's token i against the lone run's token.
        int64_t diffs = 0;
        for (int64_t i = 0; i < m.batch.t; ++i) {
          const int64_t f = m.fromA[i];
          const float *want = f >= 0 ? a.y.data() + f * row : b.y.data() + (-1 - f) * row;
          diffs += std::memcmp(batch.y.data() + i * row, want, sizeof(float) * row) != 0;
        }
        EXPECT_EQ(diffs, 0);
        EXPECT_TRUE(std::equal(a.state.begin(), a.state.end(), batch.state.begin()));
        EXPECT_TRUE(std::equal(b.state.begin(), b.state.end(), batch.state.begin() + slot));
        // Sequence 2 is not in the batch: its slot is untouched.
        EXPECT_TRUE(
            std::equal(batch.state.begin() + 2 * slot, batch.state.end(), m.batch.state.begin() + 2 * slot));
        // And the lone runs are right: a from zero (its NaN state ignored), b from its stored state.
        const Result refA = runReference(m.a), refB = runReference(m.b);
        EXPECT_LE(relErr(a.y, refA.y), kTol);
        EXPECT_LE(relErr(b.y, refB.y), kTol);
        EXPECT_LE(relErr(std::vector<float>(batch.state.begin(), batch.state.begin() + slot), refA.state),
                  kTol);
        // b's stored state matters: from a zero state its outputs differ.
        Problem bZero = m.b;
        std::fill(bZero.state.begin(), bZero.state.end(), 0.0f);
        EXPECT_GT(relErr(runReference(bZero).y, refB.y), 1e-2);
      }
}

TEST(DeltaNet, ThreadCountIndependent) {
  // Sequences of 1, 40 and 130 tokens, interleaved.
  Problem p;
  p.hk = 3, p.hv = 6, p.dk = 32, p.dv = 48, p.sequences = 4;
  const int64_t lens[] = {1, 40, 130};
  std::vector<int32_t> seqOf;
  for (int32_t s = 0; s < 3; ++s)
    seqOf.insert(seqOf.end(), static_cast<size_t>(lens[s]), s + 1);
  std::shuffle(seqOf.begin(), seqOf.end(), std::mt19937(5));
  int32_t next[4] = {0, 0, 5, 0}; // the 130-token run starts at 0: Auto chunks its first 64 tokens
  for (int32_t s : seqOf) {
    p.seq.push_back(s);
    p.pos.push_back(next[s]++);
  }
  p.t = static_cast<int64_t>(p.seq.size());
  fillInputs(p, 31, kDecays[1]);
  p.state = randomState(p, 32);
  for (Isa isa : isas())
    for (DeltaNetPath path : kPaths) {
      SCOPED_TRACE(testing::Message() << "isa " << isaName(isa) << " path " << pathName(path));
      std::vector<Result> r;
      for (int threads : {1, 2, 3}) {
        ThreadGroup tg(threads);
        r.push_back(runKernel(p, tg, isa, path));
      }
      for (size_t i = 1; i < r.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(r[i].y.data(), r[0].y.data(), sizeof(float) * r[0].y.size()));
        EXPECT_EQ(0, std::memcmp(r[i].state.data(), r[0].state.data(), sizeof(float) * r[0].state.size()));
      }
      EXPECT_LE(relErr(r[0].y, runReference(p).y), kTol);
    }
}

TEST(DeltaNet, RejectsBadArguments) {
  Problem p = oneSequence(2, 4, 16, 16, 3, 0, kDecays[1], 3);
  std::vector<float> y(static_cast<size_t>(p.t * p.hv * p.dv));
  ThreadGroup tg(1);
  p.seq[1] = 1; // the state holds one sequence
  EXPECT_THROW(deltaNet(p.args(y.data()), tg), std::invalid_argument);
  p.seq[1] = 0;
  p.hv = 3; // not a multiple of hk
  EXPECT_THROW(deltaNet(p.args(y.data()), tg), std::invalid_argument);
}

//===----------------------------------------------------------------------===//
// ssmConv
//===----------------------------------------------------------------------===//

/// One sequence's whole input history, the conv's defining sum over it: y at position p is
/// sum_j w[c, j] * x[p - (K - 1) + j], inputs before position 0 being 0.
struct ConvHistory {
  std::vector<std::vector<float>> rows; ///< input row of each position so far
};

TEST(SsmConv, MatchesDirectSumAcrossCalls) {
  for (int64_t C : {int64_t(10), int64_t(600)}) {
    SCOPED_TRACE(testing::Message() << "channels " << C);
    const int64_t K = 4, R = K - 1;
    const int32_t sequences = 3;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(C * K)), state(static_cast<size_t>(sequences * R * C));
    for (float &x : w)
      x = u(rng);
    for (float &x : state) // garbage: every sequence starts at position 0
      x = 1000.0f;
    std::vector<ConvHistory> hist(sequences);
    // Calls as (sequence, tokens) lists, mixed in a random order: 5 + 2 tokens, then 1 + 2 (fewer than
    // K - 1: the state keeps older rows), then 2 + 1 + 3 with sequence 2 starting, then 1 + 1 + 1.
    const std::vector<std::vector<std::pair<int32_t, int>>> calls = {
        {{0, 5}, {1, 2}}, {{0, 1}, {1, 2}}, {{0, 2}, {1, 1}, {2, 3}}, {{0, 1}, {1, 1}, {2, 1}}};
    ThreadGroup tg(2);
    for (const auto &call : calls) {
      std::vector<int32_t> seq;
      for (auto [s, n] : call)
        seq.insert(seq.end(), static_cast<size_t>(n), s);
      std::shuffle(seq.begin(), seq.end(), rng);
      const int64_t t = static_cast<int64_t>(seq.size());
      std::vector<int32_t> pos;
      std::vector<float> x(static_cast<size_t>(t * C)), y(static_cast<size_t>(t * C), -7.0f), want(y.size());
      for (int64_t i = 0; i < t; ++i) {
        ConvHistory &h = hist[seq[i]];
        pos.push_back(static_cast<int32_t>(h.rows.size()));
        std::vector<float> row(static_cast<size_t>(C));
        for (float &v : row)
          v = u(rng);
        std::copy(row.begin(), row.end(), x.begin() + i * C);
        h.rows.push_back(row);
        const int64_t p = static_cast<int64_t>(h.rows.size()) - 1;
        for (int64_t c = 0; c < C; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t at = p - R + j;
            if (at >= 0)
              acc += double(w[c * K + j]) * h.rows[at][c];
          }
          want[i * C + c] = static_cast<float>(acc);
        }
      }
      SsmConvArgs a;
      a.x = x.data(), a.w = w.data(), a.y = y.data(), a.t = t, a.c = C, a.k = K;
      a.pos = pos.data(), a.seq = seq.data(), a.convState = state.data(), a.sequences = sequences;
      ssmConv(a, tg);
      double err = 0;
      for (size_t i = 0; i < y.size(); ++i)
        err = std::max(err, double(std::fabs(y[i] - want[i])));
      EXPECT_LE(err, 1e-5);
      // Each sequence's state: its last K - 1 inputs (zero before position 0), oldest first.
      for (int32_t s = 0; s < sequences; ++s) {
        const auto &rows = hist[s].rows;
        if (rows.empty()) {
          EXPECT_EQ(state[s * R * C], 1000.0f); // untouched until the sequence shows up
          continue;
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t at = static_cast<int64_t>(rows.size()) - R + r;
            const float expect = at >= 0 ? rows[at][c] : 0.0f;
            ASSERT_EQ(state[(s * R + r) * C + c], expect)
                << "sequence " << s << " row " << r << " channel " << c;
          }
      }
    }
  }
}

TEST(SsmConv, WidthOneHasNoState) {
  const int64_t C = 5;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, w = {2, 3, 4, 5, 6}, y(10);
  std::vector<int32_t> pos = {0, 1};
  SsmConvArgs a;
  a.x = x.data(), a.w = w.data(), a.y = y.data(), a.t = 2, a.c = C, a.k = 1, a.pos = pos.data();
  ThreadGroup tg(1);
  ssmConv(a, tg);
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_EQ(y[i], x[i] * w[i % C]);
}

//===----------------------------------------------------------------------===//
// Timings (not run by default: --gtest_also_run_disabled_tests --gtest_filter='*DeltaNetBench*')
//===----------------------------------------------------------------------===//

double bestMs(int reps, const std::function<void()> &fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(DeltaNetBench, DISABLED_ModelShapes) {
  const Isa isa = activeIsa();
  std::printf("isa %s; ms per call, best of several\n", isaName(isa));
  for (int64_t hv : {32, 48}) {
    for (int32_t pos0 : {0, 512})
      for (int64_t len : {16, 64, 512}) {
        Problem p = oneSequence(16, hv, 128, 128, len, pos0, kDecays[1], 5);
        std::vector<float> y(static_cast<size_t>(p.t * p.hv * p.dv));
        for (int threads : {1, 2}) {
          ThreadGroup tg(threads);
          const int reps = len >= 512 ? 5 : 20;
          double ms[3];
          for (int i = 0; i < 3; ++i)
            ms[i] = bestMs(reps, [&] { deltaNet(p.args(y.data()), tg, isa, kPaths[i]); });
          std::printf(
              "prefill hk 16 hv %lld d 128, %3lld tokens from position %3d, %d thread(s): chunked %7.3f, "
              "recurrence %7.3f, auto %7.3f\n",
              (long long)hv, (long long)len, pos0, threads, ms[0], ms[1], ms[2]);
        }
      }
    for (int32_t seqs : {1, 8}) {
      Problem p;
      p.hk = 16, p.hv = hv, p.dk = 128, p.dv = 128, p.t = seqs, p.sequences = seqs, p.scale = 0.088f;
      fillInputs(p, 9, kDecays[1]);
      p.state = randomState(p, 10);
      for (int32_t s = 0; s < seqs; ++s)
        p.seq.push_back(s), p.pos.push_back(100);
      std::vector<float> y(static_cast<size_t>(p.t * p.hv * p.dv));
      for (int threads : {1, 2}) {
        ThreadGroup tg(threads);
        const double ms = bestMs(50, [&] { deltaNet(p.args(y.data()), tg); });
        std::printf("decode hk 16 hv %lld d 128, %d sequence(s) x 1 token, %d thread(s): %7.3f\n",
                    (long long)hv, seqs, threads, ms);
      }
    }
  }
}

} // namespace
