//===- ElementwiseTest.cpp - elementwise, row-wise and layout kernels on CUDA ---===//
//
// Binary ops with every broadcast shape, scale / softcap / every unary function, GLU in its fused and
// split forms (the clamped SwiGLU too), per-expert biases (AddId, all experts and a share), the row reductions (rms_norm with short and long rows, softmax, top-k with a tie,
// take_along, sum over each axis, expert_combine) and the movers (f16 copies, permutes, views, slices,
// concats), each against the CPU backend. Skips visibly without a GPU.
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

TEST(CudaKernels, BinaryBroadcastMapAndGlu) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  const std::vector<int64_t> a = {3, 5, 7};
  int32_t x = mk.input(0, a, randomFloats(105, 1, -3, 3));
  std::vector<int32_t> outs;
  for (OpKind op : {OpKind::Add, OpKind::Mul, OpKind::Div})
    for (const std::vector<int64_t> &bs :
         std::vector<std::vector<int64_t>>{{3, 5, 7}, {7}, {5, 1}, {3, 1, 7}, {1}}) {
      int32_t b = mk.input(0, bs, randomFloats(numelOf(bs), 2, 0.5f, 2.0f)), y = mk.act(0, a);
      mk.b(0).step(op, {x, b}, {y});
      outs.push_back(y);
    }
  int32_t sc = mk.act(0, a), cap = mk.act(0, a);
  mk.b(0).step(OpKind::Scale, {x}, {sc}, {}, {-2.5f});
  mk.b(0).step(OpKind::Softcap, {x}, {cap}, {}, {1.5f});
  outs.push_back(sc);
  outs.push_back(cap);
  for (int fn = 0; fn <= 6; ++fn) {
    int32_t u = mk.act(0, a);
    mk.b(0).step(OpKind::Unary, {x}, {u}, {fn});
    outs.push_back(u);
  }
  // GLU fused [gate | up] and split, on rows of 2 x 19.
  int32_t gu = mk.input(0, {4, 38}, randomFloats(152, 4, -3, 3)), g = mk.act(0, {4, 19}),
          up = mk.act(0, {4, 19});
  mk.b(0).step(OpKind::View, {gu}, {g}, {1, 0, 19});
  mk.b(0).step(OpKind::View, {gu}, {up}, {1, 19, 19});
  for (int fn : {0, 2, int(UnaryFn::SwigluOai)}) { // silu, gelu-tanh, gpt-oss's clamped SwiGLU
    int32_t y1 = mk.act(0, {4, 19}), y2 = mk.act(0, {4, 19});
    mk.b(0).step(OpKind::Glu, {gu}, {y1}, {fn});
    mk.b(0).step(OpKind::Glu, {g, up}, {y2}, {fn});
    outs.push_back(y1);
    outs.push_back(y2);
  }
  // Per-expert biases (AddId): every expert, and an expert-parallel share of experts 1..2 (the other rows
  // pass through).
  int32_t ex = mk.input(0, {3, 2, 19}, randomFloats(114, 5, -3, 3));
  int32_t ids = mk.inputI32(0, {3, 2}, {3, 0, 1, 3, 2, 1});
  int32_t bAll = mk.weightF32(0, {4, 19}, randomFloats(76, 6)), bPart = mk.weightF32(0, {2, 19}, randomFloats(38, 7));
  int32_t yAll = mk.act(0, {3, 2, 19}), yPart = mk.act(0, {3, 2, 19});
  mk.b(0).step(OpKind::AddId, {ex, bAll, ids}, {yAll});
  mk.b(0).step(OpKind::AddId, {ex, bPart, ids}, {yPart}, {1});
  outs.push_back(yAll);
  outs.push_back(yPart);
  Pair p = runBoth(mk, {{0, 1}});
  for (size_t i = 0; i < outs.size(); ++i)
    expectClose(p, 0, outs[i], 1, 1e-5, "output " + std::to_string(i));
}

TEST(CudaKernels, RowReductionsAndRouting) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  auto xv = randomFloats(5 * 4099, 3, -4, 4);
  xv[7] = xv[8]; // a tie for top-k: the lower index first
  int32_t x = mk.input(0, {5, 4099}, xv), w = mk.weightF32(0, {4099}, randomFloats(4099, 4));
  int32_t norm = mk.act(0, {5, 4099}), normW = mk.act(0, {5, 4099}), sm = mk.act(0, {5, 4099});
  int32_t top = mk.act(0, {5, 8}, DType::I32), taken = mk.act(0, {5, 8});
  mk.b(0).step(OpKind::RmsNorm, {x}, {norm}, {}, {1e-5f});
  mk.b(0).step(OpKind::RmsNorm, {x, w}, {normW}, {}, {1e-6f});
  // Rows longer than the kernel keeps in registers (8 per thread of 1024).
  int32_t wide = mk.input(0, {2, 9001}, randomFloats(2 * 9001, 9, -4, 4)), wideNorm = mk.act(0, {2, 9001});
  mk.b(0).step(OpKind::RmsNorm, {wide}, {wideNorm}, {}, {1e-5f});
  mk.b(0).step(OpKind::Softmax, {x}, {sm});
  mk.b(0).step(OpKind::TopK, {x}, {top}, {8});
  mk.b(0).step(OpKind::TakeAlong, {sm, top}, {taken});
  // Sums over each axis, the expert combine with two multipliers.
  int32_t c3 = mk.input(0, {3, 4, 33}, randomFloats(396, 5));
  int32_t s0 = mk.act(0, {4, 33}), s1 = mk.act(0, {3, 1, 33}), s2 = mk.act(0, {3, 4});
  mk.b(0).step(OpKind::Sum, {c3}, {s0}, {0, 0});
  mk.b(0).step(OpKind::Sum, {c3}, {s1}, {1, 1});
  mk.b(0).step(OpKind::Sum, {c3}, {s2}, {2, 0});
  int32_t m1 = mk.input(0, {3, 4}, randomFloats(12, 6)), m2 = mk.input(0, {3, 4}, randomFloats(12, 7));
  int32_t comb = mk.act(0, {3, 33});
  mk.b(0).step(OpKind::ExpertCombine, {c3, m1, m2}, {comb});
  Pair p = runBoth(mk, {{0, 1}});
  expectClose(p, 0, norm, 1, 1e-5, "rms_norm");
  expectClose(p, 0, normW, 1, 1e-5, "rms_norm * w");
  expectClose(p, 0, wideNorm, 1, 1e-5, "rms_norm of long rows");
  expectClose(p, 0, sm, 1, 1e-5, "softmax");
  expectClose(p, 0, top, 1, 0, "top_k");
  expectClose(p, 0, taken, 1, 1e-5, "take_along");
  expectClose(p, 0, s0, 1, 1e-5, "sum axis 0");
  expectClose(p, 0, s1, 1, 1e-5, "sum axis 1");
  expectClose(p, 0, s2, 1, 1e-5, "sum axis 2");
  expectClose(p, 0, comb, 1, 1e-5, "expert_combine");
}

TEST(CudaKernels, CopiesPermutesViewsConcats) {
  TPC_REQUIRE_GPU();
  PlanMaker mk(1, 1, 1);
  int32_t x = mk.input(0, {3, 4, 5}, randomFloats(60, 9, -100, 100));
  int32_t h = mk.act(0, {3, 4, 5}, DType::F16), back = mk.act(0, {3, 4, 5});
  mk.b(0).step(OpKind::Copy, {x}, {h});
  mk.b(0).step(OpKind::Copy, {h}, {back});
  int32_t pf = mk.act(0, {5, 3, 4}), ph = mk.act(0, {4, 5, 3}, DType::F16), phf = mk.act(0, {4, 5, 3});
  mk.b(0).step(OpKind::Permute, {x}, {pf}, {2, 0, 1});
  mk.b(0).step(OpKind::Permute, {h}, {ph}, {1, 2, 0});
  mk.b(0).step(OpKind::Copy, {ph}, {phf});
  int32_t v = mk.act(0, {3, 2, 5}), sl = mk.act(0, {3, 4, 2}), empty = mk.act(0, {3, 0, 5});
  mk.b(0).step(OpKind::View, {x}, {v}, {1, 1, 2});
  mk.b(0).step(OpKind::Slice, {x}, {sl}, {2, 3, 2});
  mk.b(0).step(OpKind::Slice, {x}, {empty}, {1, 4, 0});
  int32_t c = mk.act(0, {3, 6, 5}), c2 = mk.act(0, {3, 4, 7});
  mk.b(0).step(OpKind::Concat, {x, v, empty}, {c}, {1});
  mk.b(0).step(OpKind::Concat, {x, sl}, {c2}, {2});
  Pair p = runBoth(mk, {{0, 1}});
  for (auto [id, what] : std::vector<std::pair<int32_t, const char *>>{{back, "f32->f16->f32"},
                                                                       {pf, "permute f32"},
                                                                       {phf, "permute f16"},
                                                                       {v, "view"},
                                                                       {sl, "slice"},
                                                                       {c, "concat axis 1"},
                                                                       {c2, "concat axis 2"}})
    expectClose(p, 0, id, 1, 0, what);
}

} // namespace
