//===- OpsTest.cpp - every step op against a naive scalar reference ---------===//
//
// Each test builds a one-device plan around one op with random inputs (uneven sizes on purpose), runs
// it through a Session with 2 or 3 threads, and compares with a direct scalar computation written here.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/cpu/ops/Ops.h"
#include "runtime/cpu/quant/Quant.h"
#include "test/common/TestSupport.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(Ops, BinaryBroadcastRightAligned) {
  const std::vector<int64_t> a = {3, 5, 7};
  const std::vector<std::vector<int64_t>> rhs = {{3, 5, 7}, {7}, {5, 1}, {1, 5, 7}, {3, 1, 7}, {1}};
  for (OpKind op : {OpKind::Add, OpKind::Mul, OpKind::Div})
    for (const auto &bs : rhs) {
      PlanMaker m;
      auto av = randomFloats(105, 1), bv = randomFloats(numelOf(bs), 2, 0.5f, 2.0f);
      int32_t x = m.input(0, a, av), y = m.input(0, bs, bv), out = m.act(0, a);
      m.b(0).step(op, {x, y}, {out});
      auto s = m.run();
      ASSERT_TRUE(s);
      auto got = s->tensorData(0, out, 1);
      // Reference: index b by right-aligned coordinates, 1-dims broadcast.
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j)
          for (int64_t k = 0; k < 7; ++k) {
            int64_t c[3] = {i, j, k}, bi = 0;
            for (size_t d = 0; d < bs.size(); ++d) {
              int64_t ad = 3 - bs.size() + d;
              bi = bi * bs[d] + (bs[d] == 1 ? 0 : c[ad]);
            }
            float u = av[(i * 5 + j) * 7 + k], v = bv[bi];
            float want = op == OpKind::Add ? u + v : op == OpKind::Mul ? u * v : u / v;
            ASSERT_FLOAT_EQ(got[(i * 5 + j) * 7 + k], want) << opKindName(op) << " rhs rank " << bs.size();
          }
    }
}

TEST(Ops, ElementwiseAndUnary) {
  auto xv = randomFloats(3 * 37, 3, -3, 3);
  for (int fn = 0; fn <= 6; ++fn) {
    PlanMaker m;
    int32_t x = m.input(0, {3, 37}, xv), y = m.act(0, {3, 37});
    m.b(0).step(OpKind::Unary, {x}, {y}, {fn});
    auto s = m.run();
    ASSERT_TRUE(s);
    auto got = s->tensorData(0, y, 1);
    for (size_t i = 0; i < xv.size(); ++i) {
      double v = xv[i], want;
      switch (fn) {
      case 0:
        want = v / (1 + std::exp(-v));
        break;
      case 1:
        want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        break;
      case 2:
        want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        break;
      case 3:
        want = std::tanh(v);
        break;
      case 4:
        want = v > 0 ? v : 0;
        break;
      case 5:
        want = std::exp(v);
        break;
      default:
        want = 1 / (1 + std::exp(-v));
        break;
      }
      ASSERT_NEAR(got[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << "fn " << fn << " x " << v;
    }
  }
  PlanMaker m;
  int32_t x = m.input(0, {3, 37}, xv), y = m.act(0, {3, 37}), z = m.act(0, {3, 37});
  m.b(0).step(OpKind::Scale, {x}, {y}, {}, {-2.5f});
  m.b(0).step(OpKind::Softcap, {x}, {z}, {}, {1.5f});
  auto s = m.run();
  auto gy = s->tensorData(0, y, 1), gz = s->tensorData(0, z, 1);
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_FLOAT_EQ(gy[i], xv[i] * -2.5f);
    EXPECT_NEAR(gz[i], 1.5 * std::tanh(xv[i] / 1.5), 1e-6);
  }
}

TEST(Ops, GluOneAndTwoOperands) {
  const int64_t rows = 5, f = 19;
  auto xv = randomFloats(rows * 2 * f, 4, -2, 2);
  for (int fn : {0, 2}) {
    PlanMaker m;
    int32_t x = m.input(0, {rows, 2 * f}, xv), y = m.act(0, {rows, f});
    // Two operands: gate and up as separate tensors (the halves copied out with VIEW).
    int32_t g = m.act(0, {rows, f}), u = m.act(0, {rows, f}), y2 = m.act(0, {rows, f});
    m.b(0).step(OpKind::Glu, {x}, {y}, {fn});
    m.b(0).step(OpKind::View, {x}, {g}, {1, 0, f});
    m.b(0).step(OpKind::View, {x}, {u}, {1, f, f});
    m.b(0).step(OpKind::Glu, {g, u}, {y2}, {fn});
    auto s = m.run();
    auto got = s->tensorData(0, y, 1), got2 = s->tensorData(0, y2, 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < f; ++c) {
        float want = cpu::applyUnary(static_cast<UnaryFn>(fn), xv[r * 2 * f + c]) * xv[r * 2 * f + f + c];
        ASSERT_NEAR(got[r * f + c], want, 1e-5);
        ASSERT_FLOAT_EQ(got2[r * f + c], got[r * f + c]);
      }
  }
}

TEST(Ops, RmsNormSoftmaxTopKTakeAlong) {
  const int64_t rows = 4, n = 13, k = 3;
  auto xv = randomFloats(rows * n, 5, -2, 2), wv = randomFloats(n, 6);
  xv[2] = xv[5]; // a tie in row 0: the lower index must win
  PlanMaker m;
  int32_t x = m.input(0, {rows, n}, xv), w = m.input(0, {n}, wv);
  int32_t norm = m.act(0, {rows, n}), normW = m.act(0, {rows, n}), sm = m.act(0, {rows, n});
  int32_t top = m.act(0, {rows, k}, DType::I32), taken = m.act(0, {rows, k});
  m.b(0).step(OpKind::RmsNorm, {x}, {norm}, {}, {1e-5f});
  m.b(0).step(OpKind::RmsNorm, {x, w}, {normW}, {}, {1e-5f});
  m.b(0).step(OpKind::Softmax, {x}, {sm});
  m.b(0).step(OpKind::TopK, {x}, {top}, {k});
  m.b(0).step(OpKind::TakeAlong, {sm, top}, {taken});
  auto s = m.run();
  auto gn = s->tensorData(0, norm, 1), gw = s->tensorData(0, normW, 1), gs = s->tensorData(0, sm, 1);
  auto gt = s->tensorData(0, top, 1), gk = s->tensorData(0, taken, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &xv[r * n];
    double ss = 0, mx = -1e30, sum = 0;
    for (int64_t c = 0; c < n; ++c)
      ss += xr[c] * xr[c], mx = std::max<double>(mx, xr[c]);
    for (int64_t c = 0; c < n; ++c)
      sum += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < n; ++c) {
      double nv = xr[c] / std::sqrt(ss / n + 1e-5);
      EXPECT_NEAR(gn[r * n + c], nv, 1e-5);
      EXPECT_NEAR(gw[r * n + c], nv * wv[c], 1e-5);
      EXPECT_NEAR(gs[r * n + c], std::exp(xr[c] - mx) / sum, 1e-6);
    }
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return xr[a] > xr[b]; });
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(gt[r * k + j], idx[j]) << "row " << r;
      EXPECT_FLOAT_EQ(gk[r * k + j], gs[r * n + idx[j]]);
    }
  }
}

TEST(Ops, SumPermuteViewConcat) {
  const std::vector<int64_t> shape = {3, 4, 5};
  auto xv = randomFloats(60, 7);
  PlanMaker m;
  int32_t x = m.input(0, shape, xv);
  int32_t s1 = m.act(0, {3, 5}), s2 = m.act(0, {3, 4, 1}), p = m.act(0, {5, 3, 4}), v = m.act(0, {3, 2, 5});
  int32_t c = m.act(0, {3, 6, 5}), sl = m.act(0, {3, 4, 2});
  m.b(0).step(OpKind::Sum, {x}, {s1}, {1, 0});
  m.b(0).step(OpKind::Sum, {x}, {s2}, {2, 1});
  m.b(0).step(OpKind::Permute, {x}, {p}, {2, 0, 1});
  m.b(0).step(OpKind::View, {x}, {v}, {1, 1, 2});
  m.b(0).step(OpKind::Concat, {x, v}, {c}, {1});
  m.b(0).step(OpKind::Slice, {x}, {sl}, {2, 3, 2});
  auto s = m.run();
  auto g1 = s->tensorData(0, s1, 1), g2 = s->tensorData(0, s2, 1), gp = s->tensorData(0, p, 1);
  auto gv = s->tensorData(0, v, 1), gc = s->tensorData(0, c, 1), gs = s->tensorData(0, sl, 1);
  auto X = [&](int i, int j, int k) { return xv[(i * 4 + j) * 5 + k]; };
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      float want = 0;
      for (int j = 0; j < 4; ++j)
        want += X(i, j, k);
      EXPECT_NEAR(g1[i * 5 + k], want, 1e-6);
    }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      float want = 0;
      for (int k = 0; k < 5; ++k)
        want += X(i, j, k);
      EXPECT_NEAR(g2[i * 4 + j], want, 1e-6);
    }
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 3; ++b)
      for (int cc = 0; cc < 4; ++cc)
        EXPECT_EQ(gp[(a * 3 + b) * 4 + cc], X(b, cc, a));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 5; ++k)
        EXPECT_EQ(gv[(i * 2 + j) * 5 + k], X(i, j + 1, k));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 6; ++j)
      for (int k = 0; k < 5; ++k)
        EXPECT_EQ(gc[(i * 6 + j) * 5 + k], j < 4 ? X(i, j, k) : X(i, j - 4 + 1, k));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ(gs[(i * 4 + j) * 2 + k], X(i, j, k + 3));
}

/// Rows of `type` quantized from floats, and their dequantized values.
std::vector<uint8_t> quantized(GGMLType type, const std::vector<float> &v, int64_t k,
                               std::vector<float> &deq) {
  const uint64_t rb = *ggmlRowBytes(type, k);
  const int64_t rows = v.size() / k;
  std::vector<uint8_t> out(rows * rb);
  deq.resize(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantizeRow(type, &v[r * k], out.data() + r * rb, k);
    dequantizeRow(type, out.data() + r * rb, &deq[r * k], k);
  }
  return out;
}

TEST(Ops, MatmulAndGetRowsEveryWeightKind) {
  const int64_t m = 5, n = 37, k = 256;
  auto xv = randomFloats(m * k, 8), wv = randomFloats(n * k, 9);
  for (GGMLType type : {GGMLType::F32, GGMLType::F16, GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q6_K}) {
    PlanMaker mk;
    std::vector<float> deq;
    int32_t w;
    if (type == GGMLType::F32) {
      w = mk.weightF32(0, {n, k}, wv);
      deq = wv;
    } else {
      w = mk.weightRaw(0, type, {n, k}, quantized(type, wv, k, deq));
    }
    int32_t x = mk.input(0, {m, k}, xv), y = mk.act(0, {m, n});
    int32_t ids = mk.inputI32(0, {4}, {36, 0, 5, 5}), rows = mk.act(0, {4, k});
    mk.b(0).step(OpKind::Matmul, {x, w}, {y});
    mk.b(0).step(OpKind::GetRows, {w, ids}, {rows});
    auto s = mk.run(1, 3);
    ASSERT_TRUE(s);
    auto got = s->tensorData(0, y, 1);
    auto want = tpc::test::refMatmul(xv, deq, m, n, k);
    // Quantized types quantize the activations to 8 bits too (as the reference engine does).
    float tol = type == GGMLType::F32 ? 1e-4f : type == GGMLType::F16 ? 2e-3f : 0.15f;
    EXPECT_LT(maxAbsDiff(got, want), tol) << ggmlTypeName(type);
    auto gr = s->tensorData(0, rows, 1);
    const int want_ids[4] = {36, 0, 5, 5};
    for (int i = 0; i < 4; ++i)
      for (int64_t c = 0; c < k; ++c)
        ASSERT_EQ(gr[i * k + c], deq[want_ids[i] * k + c]) << ggmlTypeName(type);
  }
  // An f32 activation can be the right-hand side.
  PlanMaker mk;
  int32_t x = mk.input(0, {m, 64}, randomFloats(m * 64, 10)),
          w = mk.input(0, {7, 64}, randomFloats(7 * 64, 11));
  int32_t y = mk.act(0, {m, 7});
  mk.b(0).step(OpKind::Matmul, {x, w}, {y});
  auto s = mk.run();
  EXPECT_LT(maxAbsDiff(s->tensorData(0, y, 1),
                       tpc::test::refMatmul(randomFloats(m * 64, 10), randomFloats(7 * 64, 11), m, 7, 64)),
            1e-4f);
}

TEST(Ops, MulMatIdGroupsTokensByExpert) {
  const int64_t t = 6, kk = 2, e = 5, n = 9, k = 64;
  auto wv = randomFloats(e * n * k, 12);
  std::vector<int32_t> ids = {0, 4, 4, 1, 2, 2, 0, 3, 4, 0, 1, 3};
  for (bool perSlot : {false, true}) {
    PlanMaker mk;
    auto xv = randomFloats((perSlot ? t * kk : t) * k, 13);
    int32_t w = mk.weightF32(0, {e, n, k}, wv);
    int32_t x = perSlot ? mk.input(0, {t, kk, k}, xv) : mk.input(0, {t, k}, xv);
    int32_t id = mk.inputI32(0, {t, kk}, ids), y = mk.act(0, {t, kk, n});
    mk.b(0).step(OpKind::MulMatId, {x, w, id}, {y});
    auto s = mk.run();
    ASSERT_TRUE(s);
    auto got = s->tensorData(0, y, 1);
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t j = 0; j < kk; ++j)
        for (int64_t r = 0; r < n; ++r) {
          int32_t ex = ids[ti * kk + j];
          const float *xr = &xv[(perSlot ? ti * kk + j : ti) * k];
          double want = 0;
          for (int64_t c = 0; c < k; ++c)
            want += double(xr[c]) * wv[(ex * n + r) * k + c];
          ASSERT_NEAR(got[(ti * kk + j) * n + r], want, 1e-4);
        }
  }
}

/// Per-expert biases: every (token, slot) row gets its expert's bias row; with firstExpert (an
/// expert-parallel share of the bias rows) only the experts this device holds are added, other rows are
/// copied unchanged (zeros there in a real routed plan).
TEST(Ops, AddIdAddsTheSelectedExpertsBias) {
  const int64_t t = 3, k = 2, n = 7, e = 4;
  std::vector<int32_t> ids = {3, 0, 1, 3, 2, 1};
  auto xv = randomFloats(t * k * n, 21), bv = randomFloats(e * n, 22);
  for (int64_t first : {-1, 1}) { // -1: every expert; 1: this device holds experts 1 and 2
    const int64_t rows = first < 0 ? e : 2, off = first < 0 ? 0 : first;
    std::vector<float> share(bv.begin() + off * n, bv.begin() + (off + rows) * n);
    PlanMaker mk;
    int32_t x = mk.input(0, {t, k, n}, xv), b = mk.weightF32(0, {rows, n}, share);
    int32_t id = mk.inputI32(0, {t, k}, ids), y = mk.act(0, {t, k, n});
    mk.b(0).step(OpKind::AddId, {x, b, id}, {y}, first < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{first});
    auto s = mk.run();
    ASSERT_TRUE(s);
    auto got = s->tensorData(0, y, 1);
    for (int64_t r = 0; r < t * k; ++r) {
      const int64_t ex = ids[r] - off;
      for (int64_t c = 0; c < n; ++c)
        EXPECT_EQ(got[r * n + c], ex >= 0 && ex < rows ? xv[r * n + c] + share[ex * n + c] : xv[r * n + c])
            << "row " << r << " first " << first;
    }
  }
}

TEST(Ops, ExpertCombineMultipliesAndSums) {
  const int64_t t = 3, k = 4, n = 11;
  auto xv = randomFloats(t * k * n, 14), m1 = randomFloats(t * k, 15), m2 = randomFloats(t * k, 16);
  PlanMaker mk;
  int32_t x = mk.input(0, {t, k, n}, xv), a = mk.input(0, {t, k}, m1), b = mk.input(0, {t, k}, m2);
  int32_t y = mk.act(0, {t, n});
  mk.b(0).step(OpKind::ExpertCombine, {x, a, b}, {y});
  auto s = mk.run();
  auto got = s->tensorData(0, y, 1);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double want = 0;
      for (int64_t j = 0; j < k; ++j)
        want += double(m1[i * k + j]) * m2[i * k + j] * xv[(i * k + j) * n + c];
      EXPECT_NEAR(got[i * n + c], want, 1e-5);
    }
}

/// Reference RoPE of one head vector.
void refRope(const float *x, float *y, int64_t d, int64_t nDims, int mode, int pos, float base,
             float freqScale, const float *ff) {
  std::copy(x, x + d, y);
  for (int64_t i = 0; i < nDims / 2; ++i) {
    double theta = freqScale * pos * std::pow(base, -2.0 * i / nDims) / (ff ? ff[i] : 1.0);
    int64_t a = mode ? i : 2 * i, b = mode ? i + nDims / 2 : 2 * i + 1;
    y[a] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
    y[b] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
  }
}

TEST(Ops, RopeNormalNeoxPartialAndFreqFactors) {
  const int64_t t = 5, h = 3, d = 16;
  auto table = randomFloats(t * h * d, 17);
  std::vector<float> ff(8, 1.0f);
  ff[4] = ff[5] = ff[6] = ff[7] = 1e30f;
  ff[1] = 2.0f;
  for (int mode : {0, 1})
    for (int64_t nDims : {int64_t(16), int64_t(12)})
      for (bool useFf : {false, true}) {
        PlanMaker mk(1, t, t);
        int32_t x = mk.tokenInput(0, {h, d}, table), y = mk.act(0, {-1, h, d});
        std::vector<int32_t> in = {x, mk.positions[0]};
        if (useFf)
          in.push_back(mk.input(0, {nDims / 2}, std::vector<float>(ff.begin(), ff.begin() + nDims / 2)));
        mk.b(0).step(OpKind::Rope, in, {y}, {mode, nDims}, {1000.0f, 0.5f});
        auto s = mk.run(t);
        ASSERT_TRUE(s);
        auto got = s->tensorData(0, y, t);
        std::vector<float> want(d);
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t hi = 0; hi < h; ++hi) {
            refRope(&table[(ti * h + hi) * d], want.data(), d, nDims, mode, static_cast<int>(ti), 1000.0f,
                    0.5f, useFf ? ff.data() : nullptr);
            for (int64_t c = 0; c < d; ++c)
              ASSERT_NEAR(got[(ti * h + hi) * d + c], want[c], 1e-5) << "mode " << mode << " nDims " << nDims;
          }
      }
}

TEST(Ops, CopyConvertsF16AndReshapeAliases) {
  auto xv = randomFloats(40, 18, -100, 100);
  PlanMaker mk;
  int32_t x = mk.input(0, {8, 5}, xv), h = mk.act(0, {40}, DType::F16), back = mk.act(0, {5, 8});
  int32_t alias = mk.b(0).view(x, DType::F32, {2, 20});
  int32_t r = mk.act(0, {2, 20});
  mk.b(0).step(OpKind::Copy, {x}, {h});
  mk.b(0).step(OpKind::Copy, {h}, {back});
  mk.b(0).step(OpKind::Reshape, {x}, {alias});
  mk.b(0).step(OpKind::Reshape, {x}, {r});
  auto s = mk.run();
  auto gb = s->tensorData(0, back, 1), gr = s->tensorData(0, r, 1), ga = s->tensorData(0, alias, 1);
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(gb[i], xv[i], std::fabs(xv[i]) * 1e-3);
    EXPECT_EQ(gr[i], xv[i]);
    EXPECT_EQ(ga[i], xv[i]);
  }
}

TEST(Ops, BadOperandsAreOneLineErrorsAtOpen) {
  PlanMaker mk;
  int32_t x = mk.input(0, {3, 5}, randomFloats(15, 1)), w = mk.input(0, {4, 6}, randomFloats(24, 2));
  int32_t y = mk.act(0, {3, 4});
  mk.b(0).step(OpKind::Matmul, {x, w}, {y}, {}, {}, "blk.0.attn_q");
  SessionOptions o = mk.options();
  auto s = Session::open(mk.plan, o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("blk.0.attn_q"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("matmul"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

} // namespace
