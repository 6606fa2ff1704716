//===- ExecTestUtil.h - hand-built plans for executor tests -------*- C++ -*-===//
//
// PlanMaker builds plans through the PlanFormat structs with the weights in memory (the "GGUF" is a byte
// vector that the pieces index), so every op can be fed chosen data: constant inputs are weight slices
// copied into activations with a COPY step; token-dim inputs go through GET_ROWS on the input tokens.
// Activation offsets are handed out bump-style per device. Session::tensorData reads results back.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_RUNTIME_EXEC_EXECTESTUTIL_H
#define TPC_TEST_RUNTIME_EXEC_EXECTESTUTIL_H

#include "runtime/exec/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace tpc::rt::test {

/// Random floats in [lo, hi).
inline std::vector<float> randomFloats(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

inline int64_t numelOf(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// Builds a plan with `devices` devices and weights held in memory.
class PlanMaker {
public:
  explicit PlanMaker(int devices = 1, int64_t maxBatch = 1, int64_t nVocab = 1) {
    plan.model = {"test", nVocab, 4096, maxBatch, 64};
    plan.devices.resize(devices);
    used.assign(devices, 0);
    hostUsed.assign(devices, 0);
    wUsed.assign(devices, 0);
    gguf.resize(64, 0); // nothing at offset 0, like a header
    for (int d = 0; d < devices; ++d) {
      tokens.push_back(b(d).io(Storage::InputTokens, DType::I32, {-1}));
      positions.push_back(b(d).io(Storage::InputPositions, DType::I32, {-1}));
      logits.push_back(b(d).io(Storage::OutputLogits, DType::F32, {-1, nVocab}));
    }
  }
  DevicePlanBuilder b(int d) { return DevicePlanBuilder(plan.devices[d]); }

  /// Appends raw bytes to the fake GGUF; returns their file offset.
  uint64_t addBytes(const void *p, size_t n) {
    while (gguf.size() % 32)
      gguf.push_back(0);
    uint64_t at = gguf.size();
    gguf.insert(gguf.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
    return at;
  }
  /// A weight tensor of any type from rows of bytes (one piece).
  int32_t weightRaw(int d, GGMLType type, std::vector<int64_t> shape, const std::vector<uint8_t> &bytes) {
    uint64_t off = addBytes(bytes.data(), bytes.size());
    uint64_t rowBytes = *ggmlRowBytes(type, shape.back());
    uint64_t rows = bytes.size() / rowBytes;
    return weightPieces(d, type, shape, {{off, rowBytes, rowBytes, rows}});
  }
  /// A weight assembled from pieces of the fake GGUF.
  int32_t weightPieces(int d, GGMLType type, std::vector<int64_t> shape, std::vector<WeightPiece> pieces) {
    WeightSlice w;
    w.name = "w" + std::to_string(plan.devices[d].weights.size());
    w.type = type;
    w.shape = shape;
    w.bytes = 0;
    for (auto &p : pieces)
      w.bytes += p.rows * p.rowBytes;
    w.offset = wUsed[d];
    w.pieces = std::move(pieces);
    wUsed[d] += (w.bytes + 63) / 64 * 64;
    plan.devices[d].weightBytes = wUsed[d];
    int32_t id = b(d).weight(b(d).addWeight(std::move(w)));
    if (type == GGMLType::I32)
      plan.devices[d].tensors[id].dtype = DType::I32;
    return id;
  }
  /// An f32 weight.
  int32_t weightF32(int d, std::vector<int64_t> shape, const std::vector<float> &v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return weightRaw(d, GGMLType::F32, shape, bytes);
  }
  /// A fresh activation (token dim allowed in shape[0]).
  int32_t act(int d, std::vector<int64_t> shape, DType dt = DType::F32) {
    uint64_t off = place(shape, dt, used[d]);
    plan.devices[d].activationBytes = used[d];
    return b(d).activation(dt, std::move(shape), off);
  }
  /// A host-placed activation, in the host arena (its own offsets).
  int32_t hostAct(int d, std::vector<int64_t> shape, DType dt = DType::F32) {
    uint64_t off = place(shape, dt, hostUsed[d]);
    plan.devices[d].hostActivationBytes = hostUsed[d];
    return b(d).activation(dt, std::move(shape), off, Placement::Host);
  }
  /// A constant f32 activation (weight + COPY).
  int32_t input(int d, std::vector<int64_t> shape, const std::vector<float> &v) {
    int32_t w = weightF32(d, shape, v);
    int32_t a = act(d, shape);
    b(d).step(OpKind::Copy, {w}, {a});
    return a;
  }
  /// A constant i32 activation.
  int32_t inputI32(int d, std::vector<int64_t> shape, const std::vector<int32_t> &v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    int32_t w = weightRaw(d, GGMLType::I32, shape, bytes);
    int32_t a = act(d, shape, DType::I32);
    b(d).step(OpKind::Copy, {w}, {a});
    return a;
  }
  /// Token-dim input: rows[token] of `table` ([rows, prod(inner)]) viewed as [-1, inner...].
  int32_t tokenInput(int d, std::vector<int64_t> inner, const std::vector<float> &table) {
    int64_t row = numelOf(inner);
    int64_t rows = static_cast<int64_t>(table.size()) / row;
    int32_t w = weightF32(d, {rows, row}, table);
    int32_t flat = act(d, {-1, row});
    b(d).step(OpKind::GetRows, {w, tokens[d]}, {flat});
    std::vector<int64_t> shape = {-1};
    shape.insert(shape.end(), inner.begin(), inner.end());
    return b(d).view(flat, DType::F32, shape);
  }
  /// Options reading the weights from this maker's memory (and the plan's GGUF size set to match), with
  /// `threads` in total (0: the session's default) and context `ctx` (0: the plan's default).
  SessionOptions options(int threads = 0, int64_t ctx = 0) {
    plan.ggufSize = gguf.size();
    SessionOptions o;
    o.threads = threads;
    o.ctxSize = ctx;
    o.ggufData = gguf.data();
    o.ggufDataSize = gguf.size();
    return o;
  }
  /// Opens a session (weights from memory).
  std::unique_ptr<Session> open(int threads = 2, int64_t ctx = 64) {
    auto s = Session::open(plan, options(threads * static_cast<int>(plan.devices.size()), ctx));
    EXPECT_TRUE(s) << (s ? "" : s.message());
    return s ? std::move(*s) : nullptr;
  }
  /// Opens, runs tokens 0..t-1 at positions 0..t-1, returns the session.
  std::unique_ptr<Session> run(int64_t t = 1, int threads = 2) {
    auto s = open(threads);
    if (!s)
      return s;
    std::vector<int32_t> ids(t), pos(t);
    for (int64_t i = 0; i < t; ++i)
      ids[i] = pos[i] = static_cast<int32_t>(i);
    auto r = s->evaluate(ids, pos);
    EXPECT_TRUE(r) << (r ? "" : r.message());
    return s;
  }

  Plan plan;
  std::vector<uint8_t> gguf;
  std::vector<uint64_t> used, hostUsed, wUsed; ///< arena bytes handed out per device

private:
  /// The next 64-byte aligned slot of an arena whose used bytes are `end`; advances `end`.
  uint64_t place(const std::vector<int64_t> &shape, DType dt, uint64_t &end) const {
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i)
      n *= (i == 0 && shape[i] == -1) ? plan.model.maxBatch : shape[i];
    uint64_t off = end;
    end += (n * dtypeBytes(dt) + 63) / 64 * 64;
    return off;
  }

public:
  std::vector<int32_t> tokens, positions, logits;
};

/// max |a - b|, and fails when sizes differ. NaN when any difference is NaN, so `EXPECT_LT(maxAbsDiff(..),
/// tol)` fails on it (std::max would skip it).
inline float maxAbsDiff(const std::vector<float> &a, const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (std::isnan(d))
      return d;
    m = std::max(m, d);
  }
  return m;
}

} // namespace tpc::rt::test

#endif // TPC_TEST_RUNTIME_EXEC_EXECTESTUTIL_H
