//===- Calibration.cpp - time the kernel levels on a plan's decode work ------===//
//
// calibrate(): interleaved rounds over the candidate levels, the fastest time per piece and level kept,
// then pickIsa() on the weighted sums (Calibration.h says why). Buffers (activation rows, outputs, the
// attention pieces' synthetic caches) are built once before the first round, so no round pays for them.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Calibration.h"

#include "runtime/cpu/Attention.h"
#include "runtime/cpu/Matmul.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <limits>

namespace tpc::rt::cpu {

std::vector<Isa> calibrationCandidates() {
  std::vector<Isa> out;
  for (Isa i : {Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI})
    if (isaAvailable(i))
      out.push_back(i);
  if (out.empty())
    out.push_back(Isa::Scalar);
  return out;
}

Isa pickIsa(const std::vector<LevelTime> &times, Isa cpuid) {
  if (times.empty())
    return cpuid;
  const LevelTime *fastest = &times.front(), *base = nullptr;
  for (const LevelTime &t : times) {
    if (t.seconds < fastest->seconds)
      fastest = &t;
    if (t.isa == cpuid)
      base = &t;
  }
  if (base && base->seconds <= fastest->seconds * (1 + kCalibrationMargin))
    return base->isa;
  return fastest->isa;
}

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// CPU seconds of the calling thread: what the kernels cost, without the time another process held the core.
double threadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// A deterministic, cheap fill of unit-scale values (the content does not change the kernels' speed; it
/// only has to be finite, and varied enough that no branch or table lookup sees one value).
void fillValues(float *x, size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / float(1 << 23);
  }
}

/// A cache half of `cells` positions x `heads` rows of `d` values of type `t`: one row stored the way the
/// op entry stores K/V (AttentionOps.cpp), copied to every row.
std::vector<uint8_t> syntheticCache(GGMLType t, int64_t cells, int64_t heads, int64_t d) {
  const size_t rowBytes = static_cast<size_t>(kvRowBytes(t, d));
  std::vector<float> src(static_cast<size_t>(d));
  fillValues(src.data(), src.size(), 7);
  std::vector<uint8_t> row(rowBytes);
  if (t == GGMLType::F16)
    fp32ToFp16Row(src.data(), reinterpret_cast<uint16_t *>(row.data()), d);
  else if (t == GGMLType::F32)
    std::memcpy(row.data(), src.data(), rowBytes);
  else
    quantizeRow(t, src.data(), row.data(), d);
  const size_t rows = static_cast<size_t>(cells * heads);
  std::vector<uint8_t> out(rowBytes * rows);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * rowBytes, row.data(), rowBytes);
  return out;
}

/// An attention piece's buffers: one decode token at position depth - 1 of sequence 0.
struct AttentionBuffers {
  std::vector<uint8_t> k, v;
  std::vector<float> q, y;
  int32_t pos = 0;
  AttentionArgs args(const CalibAttention &p) {
    AttentionArgs a;
    a.q = q.data(), a.y = y.data();
    a.t = 1, a.hq = p.hq, a.hkv = p.hkv, a.dk = p.dk, a.dv = p.dv;
    a.pos = &pos;
    a.k = k.data(), a.v = v.data();
    a.typeK = p.typeK, a.typeV = p.typeV;
    a.ctx = p.depth;
    a.scale = 1.0f / 16, a.softcap = p.softcap;
    return a;
  }
};
} // namespace

Calibration calibrate(const CalibrationWork &work, const std::vector<Isa> &candidates, double budgetSeconds) {
  const double start = now();
  Calibration c;
  for (Isa i : candidates)
    c.times.push_back({i, 0});
  const size_t pieces = work.matmuls.size() + work.attention.size();
  if (candidates.size() < 2 || pieces == 0) {
    c.chosen = candidates.empty() ? bestAvailableIsa() : candidates.back(); // nothing measured: the best
    c.wallSeconds = now() - start;
    return c;
  }

  ThreadGroup tg(1); // the caller alone: its CPU time is the kernels' (Calibration.h says why)
  int64_t maxK = 1, maxN = 1;
  for (const CalibMatmul &m : work.matmuls)
    maxK = std::max(maxK, m.k), maxN = std::max(maxN, m.n);
  std::vector<float> x(static_cast<size_t>(maxK)), y(static_cast<size_t>(maxN));
  fillValues(x.data(), x.size(), 1);
  std::vector<AttentionBuffers> att(work.attention.size());
  for (size_t i = 0; i < att.size(); ++i) {
    const CalibAttention &p = work.attention[i];
    att[i].k = syntheticCache(p.typeK, p.depth, p.hkv, p.dk);
    att[i].v = syntheticCache(p.typeV, p.depth, p.hkv, p.dv);
    att[i].q.resize(static_cast<size_t>(p.hq * p.dk));
    fillValues(att[i].q.data(), att[i].q.size(), 3);
    att[i].y.resize(static_cast<size_t>(p.hq * p.dv));
    att[i].pos = static_cast<int32_t>(p.depth - 1);
  }

  auto runPiece = [&](size_t i, Isa isa) {
    if (i < work.matmuls.size()) {
      const CalibMatmul &p = work.matmuls[i];
      MatmulArgs a;
      a.isa = isa;
      a.w = p.w, a.wType = p.type, a.n = p.n, a.k = p.k, a.wRowStride = p.stride;
      a.x = x.data(), a.m = 1, a.xRowStride = static_cast<size_t>(p.k);
      a.y = y.data(), a.yRowStride = static_cast<size_t>(p.n);
      matmul(a, tg);
    } else {
      const size_t j = i - work.matmuls.size();
      flashAttention(att[j].args(work.attention[j]), tg, isa);
    }
  };
  // One untimed pass per level: first touches (page faults of the outputs, the kernel tables' one-time
  // construction, the thread group's scratch) land here.
  for (Isa isa : candidates)
    for (size_t i = 0; i < pieces; ++i)
      runPiece(i, isa);

  std::vector<std::vector<double>> best(candidates.size(),
                                        std::vector<double>(pieces, std::numeric_limits<double>::infinity()));
  for (int r = 0; r < kMaxCalibrationRounds; ++r) {
    if (r >= kMinCalibrationRounds && now() - start > budgetSeconds)
      break;
    for (size_t l = 0; l < candidates.size(); ++l) {
      const size_t level = (l + static_cast<size_t>(r)) % candidates.size(); // rotate who goes first
      for (size_t i = 0; i < pieces; ++i) {
        const double t0 = threadSeconds();
        runPiece(i, candidates[level]);
        best[level][i] = std::min(best[level][i], threadSeconds() - t0);
      }
    }
    ++c.rounds;
  }
  for (size_t l = 0; l < candidates.size(); ++l) {
    double sum = 0;
    for (size_t i = 0; i < pieces; ++i)
      sum += best[l][i] * (i < work.matmuls.size() ? work.matmuls[i].weight
                                                   : work.attention[i - work.matmuls.size()].weight);
    c.times[l].seconds = sum;
  }
  c.chosen = pickIsa(c.times, bestAvailableIsa());
  c.wallSeconds = now() - start;
  return c;
}

} // namespace tpc::rt::cpu
