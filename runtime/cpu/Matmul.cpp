//===- Matmul.cpp - quantized matrix multiplication on the CPU -------------===//
//
// The driver shared by matmul and matmulId: validate, convert the activation rows once (through the cache
// when there is one), cut the work into units (runs of weight rows for the row kernels, 32-row panels for
// the panel kernels), and run them as one dynamically scheduled job. A "token set" is the list of
// (input row, output row) pairs a weight is applied to: every row for matmul, an expert's routed entries
// for matmulId.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"

#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::rt::cpu {
namespace {

[[noreturn]] void fail(const char *op, const std::string &msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

/// The weight operand and output of a product.
struct Operands {
  const uint8_t *w;
  GGMLType t;
  int64_t n, k;
  size_t wStride;
  float *y;
  size_t yStride;
};

void validate(const char *op, const Operands &o, const float *x, size_t xStride, int64_t m, bool indexed) {
  if (!supportsDequantize(o.t))
    fail(op, std::string("weight type ") + ggmlTypeName(o.t) +
                 " is not supported by the CPU backend (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
                 "q8_0, q2_K..q8_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, "
                 "mxfp4)");
  if (o.n < 0 || m < 0 || o.k < 0)
    fail(op, "bad shape n=" + std::to_string(o.n) + " k=" + std::to_string(o.k) + " m=" + std::to_string(m));
  std::optional<uint64_t> rowBytes = ggmlRowBytes(o.t, static_cast<uint64_t>(o.k));
  if (!rowBytes)
    fail(op, "row length k=" + std::to_string(o.k) + " is not a multiple of the " + ggmlTypeName(o.t) +
                 " block size " + std::to_string(ggmlTypeInfo(o.t).blockElems));
  if (o.n > 1 && o.wStride < *rowBytes)
    fail(op, "weight row stride " + std::to_string(o.wStride) + " is smaller than a row (" +
                 std::to_string(*rowBytes) + " bytes)");
  if (m > 0 && o.n > 0 && (!o.y || (o.k > 0 && (!o.w || !x))))
    fail(op, "null weight, input or output pointer");
  // With index arrays any row may be used, so the strides must hold a whole row whatever m is.
  if ((m > 1 || indexed) && xStride < static_cast<size_t>(o.k))
    fail(op, "input row stride " + std::to_string(xStride) + " is smaller than k=" + std::to_string(o.k));
  if ((m > 1 || indexed) && o.yStride < static_cast<size_t>(o.n))
    fail(op, "output row stride " + std::to_string(o.yStride) + " is smaller than n=" + std::to_string(o.n));
}

/// Activation rows in the kernels' format.
struct Acts {
  ActFormat fmt;
  const uint8_t *base; ///< converted rows (not for F32)
  size_t rowBytes;
  const float *x; ///< f32 rows (F32)
  size_t xStride;
  const void *row(int64_t i) const {
    return fmt == ActFormat::F32 ? static_cast<const void *>(x + static_cast<size_t>(i) * xStride)
                                 : static_cast<const void *>(base + static_cast<size_t>(i) * rowBytes);
  }
};

/// Converts rows [0, rows) of x for weights of type t, once (cached when opts has a cache).
Acts convertActs(const char *op, GGMLType t, int64_t k, const float *x, size_t xStride, int64_t rows,
                 const MatmulOptions &opts, ThreadGroup &group) {
  Acts a{activationFormat(t), nullptr, 0, x, xStride};
  if (a.fmt == ActFormat::F32)
    return a;
  a.rowBytes = static_cast<size_t>(activationRowBytes(t, k));
  size_t total = 0;
  if (__builtin_mul_overflow(a.rowBytes, static_cast<size_t>(rows), &total))
    fail(op, "activation scratch for " + std::to_string(rows) + " rows overflows");
  QuantizeFn quantize = a.fmt == ActFormat::Q8 ? kernelTable(opts.isa).quantizeQ8
                                               : activationQuantizer(vecDotType(t), opts.isa);
  auto fill = [&](uint8_t *dst) {
    auto body = [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        quantize(x + static_cast<size_t>(i) * xStride, dst + a.rowBytes * static_cast<size_t>(i), k);
    };
    if (rows == 1)
      body(0, 1, 0); // one row: not worth a hand-off
    else
      group.parallelFor(rows, body);
  };
  // Cache keys: 1 for ActQ8, 100 + the legacy activation type id.
  const int key = a.fmt == ActFormat::Q8 ? 1 : 100 + static_cast<int>(vecDotType(t));
  if (opts.cache) {
    a.base = opts.cache->get(key, x, rows, k, xStride, a.rowBytes, fill);
  } else {
    uint8_t *dst = static_cast<uint8_t *>(group.sharedScratch(total));
    fill(dst);
    a.base = dst;
  }
  return a;
}

/// The (input row, output row) pairs a weight is applied to; null index arrays mean 0..count-1.
struct TokenSet {
  const int32_t *xIdx, *yIdx;
  int64_t count;
  int64_t xAt(int64_t i) const { return xIdx ? xIdx[i] : i; }
  int64_t yAt(int64_t i) const { return yIdx ? yIdx[i] : i; }
};

/// The kernels of one product.
struct Kernels {
  RowsKernel rows = nullptr;
  VecDotFn legacy = nullptr;
  PanelConvert convert = nullptr;
  PanelTile tile = nullptr;
  int R = 0;
};

Kernels kernelsFor(GGMLType t, Isa isa) {
  const KernelTable &kt = kernelTable(isa);
  Kernels k;
  k.rows = kt.getRows(t);
  k.legacy = kt.get(t);
  if (kt.panelRows > 0 && kt.getConvert(t) && kt.getTile(t)) {
    k.convert = kt.getConvert(t);
    k.tile = kt.getTile(t);
    k.R = kt.panelRows;
  }
  return k;
}

/// Rows [r0, r1) of the weight at w against every token of ts, with the row-range kernels (one call per
/// chunk of tokens; legacy types: one dot per row and token). Output row r lands in column r - col0 of the
/// token's y row (col0 > 0: a unit-wide scratch, the fused GLU).
void runRows(const Operands &o, const uint8_t *w, int64_t r0, int64_t r1, const Acts &a, const TokenSet &ts,
             const Kernels &kn, int64_t col0 = 0) {
  for (int64_t t0 = 0; t0 < ts.count; t0 += kMaxRowTokens) {
    const int nt = static_cast<int>(std::min<int64_t>(kMaxRowTokens, ts.count - t0));
    const void *act[kMaxRowTokens];
    float *yr[kMaxRowTokens];
    for (int j = 0; j < nt; ++j) {
      act[j] = a.row(ts.xAt(t0 + j));
      yr[j] = o.y + static_cast<size_t>(ts.yAt(t0 + j)) * o.yStride + (r0 - col0);
    }
    const uint8_t *wr = w + static_cast<size_t>(r0) * o.wStride;
    if (kn.rows) {
      kn.rows(o.k, wr, o.wStride, r1 - r0, act, nt, yr);
      continue;
    }
    for (int64_t r = 0; r < r1 - r0; ++r, wr += o.wStride)
      for (int j = 0; j < nt; ++j)
        yr[j][r] = kn.legacy(o.k, wr, act[j]);
  }
}

/// Panel `p` (rows 32p..32p+31 that exist) of the weight at w, converted into the thread's scratch, against
/// every token of ts; col0 as for runRows.
void runPanel(const Operands &o, const uint8_t *w, int64_t p, const Acts &a, const TokenSet &ts,
              const Kernels &kn, ThreadGroup &group, int thread, int64_t col0 = 0) {
  const int64_t r0 = p * kPanelRows;
  const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, o.n - r0));
  const size_t groupBytes = panelGroupBytes(o.t, o.k, kn.R);
  uint8_t *panel = static_cast<uint8_t *>(group.threadScratch(thread, groupBytes * (kPanelRows / kn.R)));
  kn.convert(o.k, w + static_cast<size_t>(r0) * o.wStride, o.wStride, rows, panel);
  const int groups = (rows + kn.R - 1) / kn.R;
  float tmp[kMaxTileTokens][16]; // outputs of a group that extends past n (R <= 16)
  for (int64_t t0 = 0; t0 < ts.count; t0 += kMaxTileTokens) {
    const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, ts.count - t0));
    const void *act[kMaxTileTokens];
    float *yr[kMaxTileTokens];
    for (int j = 0; j < nt; ++j) {
      act[j] = a.row(ts.xAt(t0 + j));
      yr[j] = o.y + static_cast<size_t>(ts.yAt(t0 + j)) * o.yStride;
    }
    for (int gi = 0; gi < groups; ++gi) {
      const int64_t base = r0 + static_cast<int64_t>(gi) * kn.R;
      const int valid = static_cast<int>(std::min<int64_t>(kn.R, o.n - base));
      float *out[kMaxTileTokens];
      for (int j = 0; j < nt; ++j)
        out[j] = valid == kn.R ? yr[j] + (base - col0) : tmp[j];
      kn.tile(o.k, panel + groupBytes * static_cast<size_t>(gi), act, nt, out);
      if (valid < kn.R)
        for (int j = 0; j < nt; ++j)
          std::copy(tmp[j], tmp[j] + valid, yr[j] + (base - col0));
    }
  }
}

/// One product of a job: a weight (or several experts') applied to token sets, with its kernels and
/// converted activations.
struct Product {
  Operands o;
  Acts acts;
  Kernels kn;
  std::vector<const uint8_t *> weights; ///< per token set
  std::vector<TokenSet> sets;
  std::vector<int32_t> xs, ys; ///< matmulId: entries grouped by expert (the sets point into them)
};

/// A unit of work: rows [r0, r1) of one weight against one token set (panel units: [panel, panel + 1)).
struct Unit {
  int32_t product, set;
  bool panel;
  int64_t r0, r1;
};

/// True when a token set of `count` tokens runs through panels.
bool usePanels(const Kernels &kn, int64_t count, const MatmulOptions &opts) {
  return opts.allowPanels && kn.convert && count >= kPanelMinTokens;
}

/// Rows per row-kernel unit: about eight units per thread, 8..256 rows, a multiple of eight (the lane
/// kernels' group: a run that ends inside a group recomputes part of one) (a decode unit of a 2048-wide q4_K
/// matrix at 64 rows is 72 KB of weights; fewer, larger units would leave a thread idle at the end).
int64_t rowsPerUnit(int64_t totalRows, int threads) {
  int64_t r = totalRows / (8 * static_cast<int64_t>(threads));
  r = std::clamp<int64_t>(r, 8, 256);
  return (r + 7) / 8 * 8;
}

/// Writes zeros into the output rows of every token of ts (k = 0: the empty partial sum).
void zeroOutputs(const Operands &o, const TokenSet &ts) {
  for (int64_t i = 0; i < ts.count; ++i) {
    float *yr = o.y + static_cast<size_t>(ts.yAt(i)) * o.yStride;
    std::fill(yr, yr + o.n, 0.0f);
  }
}

/// Cuts every product into units and runs them as one dynamic job. Token sets are visited in the order of
/// `setOrder` (pairs of product and set), each set's units (all its panels or row runs) together, so one
/// job can hold, say, an expert's gate and up panels next to each other while its tokens are in cache.
void runJob(const std::vector<Product> &ps, const std::vector<std::pair<int32_t, int32_t>> &setOrder,
            const MatmulOptions &opts, ThreadGroup &group) {
  int64_t totalRows = 0;
  for (const Product &p : ps)
    totalRows += p.o.n * static_cast<int64_t>(p.sets.size());
  const int64_t rpu = rowsPerUnit(totalRows, group.slots());
  std::vector<Unit> units;
  for (auto [pi, si] : setOrder) {
    const Product &p = ps[static_cast<size_t>(pi)];
    if (usePanels(p.kn, p.sets[static_cast<size_t>(si)].count, opts)) {
      for (int64_t pn = 0; pn * kPanelRows < p.o.n; ++pn)
        units.push_back({pi, si, true, pn, pn + 1});
    } else {
      for (int64_t r = 0; r < p.o.n; r += rpu)
        units.push_back({pi, si, false, r, std::min(p.o.n, r + rpu)});
    }
  }
  group.parallelDynamic(static_cast<int64_t>(units.size()), [&](int64_t u, int thread) {
    const Unit &un = units[static_cast<size_t>(u)];
    const Product &p = ps[static_cast<size_t>(un.product)];
    const uint8_t *w = p.weights[static_cast<size_t>(un.set)];
    const TokenSet &ts = p.sets[static_cast<size_t>(un.set)];
    if (un.panel)
      runPanel(p.o, w, un.r0, p.acts, ts, p.kn, group, thread);
    else
      runRows(p.o, w, un.r0, un.r1, p.acts, ts, p.kn);
  });
}

void checkIdArgs(const char *op, const MatmulIdArgs &a) {
  if (a.count > 0 && (!a.experts || !a.xRows || !a.yRows))
    fail(op, "null expert or row index array");
  for (int64_t i = 0; i < a.count; ++i) {
    if (a.experts[i] < 0 || a.experts[i] >= a.nExperts)
      fail(op, "expert " + std::to_string(a.experts[i]) + " at position " + std::to_string(i) +
                   " is out of range (" + std::to_string(a.nExperts) + " experts)");
    if (a.xRows[i] < 0 || a.xRows[i] >= a.xRowCount || a.yRows[i] < 0)
      fail(op, "row index out of range at position " + std::to_string(i));
  }
  size_t offset = 0;
  if (a.nExperts > 0 && __builtin_mul_overflow(static_cast<size_t>(a.nExperts - 1), a.wExpertStride, &offset))
    fail(op, "expert offset overflows");
  Operands o{static_cast<const uint8_t *>(a.w), a.wType, a.n, a.k, a.wRowStride, a.y, a.yRowStride};
  validate(op, o, a.x, a.xRowStride, a.count, true);
}

/// The product of one matmulId part: entries grouped by expert (a counting sort, entry order kept within an
/// expert), one token set per used expert.
Product idProduct(const char *op, const MatmulIdArgs &a, ThreadGroup &group) {
  Product p{Operands{static_cast<const uint8_t *>(a.w), a.wType, a.n, a.k, a.wRowStride, a.y, a.yRowStride},
            convertActs(op, a.wType, a.k, a.x, a.xRowStride, a.xRowCount, a, group),
            kernelsFor(a.wType, a.isa),
            {},
            {},
            std::vector<int32_t>(static_cast<size_t>(a.count)),
            std::vector<int32_t>(static_cast<size_t>(a.count))};
  std::vector<int64_t> start(static_cast<size_t>(a.nExperts) + 1, 0);
  for (int64_t i = 0; i < a.count; ++i)
    ++start[static_cast<size_t>(a.experts[i]) + 1];
  for (size_t e = 1; e < start.size(); ++e)
    start[e] += start[e - 1];
  std::vector<int64_t> fillAt(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < a.count; ++i) {
    const size_t at = static_cast<size_t>(fillAt[static_cast<size_t>(a.experts[i])]++);
    p.xs[at] = a.xRows[i];
    p.ys[at] = a.yRows[i];
  }
  for (int64_t e = 0; e < a.nExperts; ++e) {
    const size_t b = static_cast<size_t>(start[static_cast<size_t>(e)]);
    const int64_t c = start[static_cast<size_t>(e) + 1] - start[static_cast<size_t>(e)];
    if (c == 0)
      continue;
    p.weights.push_back(p.o.w + static_cast<size_t>(e) * a.wExpertStride);
    p.sets.push_back(TokenSet{p.xs.data() + b, p.ys.data() + b, c});
  }
  return p;
}

} // namespace

void matmulBatch(const MatmulArgs *parts, size_t count, ThreadGroup &group) {
  const char *op = "matmul";
  std::vector<Product> ps;
  std::vector<std::pair<int32_t, int32_t>> order;
  for (size_t i = 0; i < count; ++i) {
    const MatmulArgs &a = parts[i];
    Operands o{static_cast<const uint8_t *>(a.w), a.wType, a.n, a.k, a.wRowStride, a.y, a.yRowStride};
    validate(op, o, a.x, a.xRowStride, a.m, false);
  }
  if (count > 0 && parts[0].f32Reference) {
    for (size_t i = 0; i < count; ++i)
      matmulReference(parts[i], group);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const MatmulArgs &a = parts[i];
    Operands o{static_cast<const uint8_t *>(a.w), a.wType, a.n, a.k, a.wRowStride, a.y, a.yRowStride};
    const TokenSet all{nullptr, nullptr, a.m};
    if (a.m == 0 || a.n == 0)
      continue;
    if (a.k == 0) {
      zeroOutputs(o, all);
      continue;
    }
    order.emplace_back(static_cast<int32_t>(ps.size()), 0);
    ps.push_back(Product{o, convertActs(op, a.wType, a.k, a.x, a.xRowStride, a.m, a, group),
                         kernelsFor(a.wType, a.isa), {o.w}, {all}, {}, {}});
  }
  if (!ps.empty())
    runJob(ps, order, parts[0], group);
}

void matmul(const MatmulArgs &a, ThreadGroup &group) { matmulBatch(&a, 1, group); }

void matmulIdBatch(const MatmulIdArgs *parts, size_t count, ThreadGroup &group) {
  const char *op = "matmul_id";
  for (size_t i = 0; i < count; ++i)
    checkIdArgs(op, parts[i]);
  if (count > 0 && parts[0].f32Reference) {
    for (size_t i = 0; i < count; ++i)
      matmulIdReference(parts[i], group);
    return;
  }
  std::vector<Product> ps;
  for (size_t i = 0; i < count; ++i) {
    const MatmulIdArgs &a = parts[i];
    if (a.count == 0 || a.n == 0)
      continue;
    if (a.k == 0) {
      zeroOutputs(Operands{nullptr, a.wType, a.n, a.k, 0, a.y, a.yRowStride}, TokenSet{nullptr, a.yRows, a.count});
      continue;
    }
    ps.push_back(idProduct(op, a, group));
  }
  // Experts with the most tokens first (their units are the longest; dynamic claiming then fills the end of
  // the job with the short ones), and the parts of one expert (gate, up) next to each other.
  std::vector<std::pair<int32_t, int32_t>> order;
  for (size_t pi = 0; pi < ps.size(); ++pi)
    for (size_t si = 0; si < ps[pi].sets.size(); ++si)
      order.emplace_back(static_cast<int32_t>(pi), static_cast<int32_t>(si));
  auto expertOf = [&](const std::pair<int32_t, int32_t> &u) {
    const Product &p = ps[static_cast<size_t>(u.first)];
    return p.sets[static_cast<size_t>(u.second)].count;
  };
  std::stable_sort(order.begin(), order.end(), [&](const auto &l, const auto &r) {
    const int64_t cl = expertOf(l), cr = expertOf(r);
    return cl != cr ? cl > cr : l.second < r.second;
  });
  if (!ps.empty())
    runJob(ps, order, parts[0], group);
}

void matmulId(const MatmulIdArgs &a, ThreadGroup &group) { matmulIdBatch(&a, 1, group); }

void matmulIdGlu(const MatmulIdArgs &gateArgs, const MatmulIdArgs &upArgs, UnaryFn fn, GluRowFn glu,
                 ThreadGroup &group) {
  const char *op = "matmul_id+glu";
  checkIdArgs(op, gateArgs);
  checkIdArgs(op, upArgs);
  if (gateArgs.f32Reference || upArgs.f32Reference)
    fail(op, "the float32 reference runs the steps unfused");
  const int64_t cnt = gateArgs.count;
  if (upArgs.n != gateArgs.n || upArgs.k != gateArgs.k || upArgs.count != cnt || upArgs.x != gateArgs.x ||
      !std::equal(gateArgs.experts, gateArgs.experts + cnt, upArgs.experts) ||
      !std::equal(gateArgs.xRows, gateArgs.xRows + cnt, upArgs.xRows))
    fail(op, "gate and up differ in shape, input or routing");
  const int64_t f = gateArgs.n;
  float *y = gateArgs.y;
  const size_t yStride = gateArgs.yRowStride;
  if (cnt == 0 || f == 0)
    return;
  if (gateArgs.k == 0) { // empty partial sums: fn(0) * 0
    zeroOutputs(Operands{nullptr, gateArgs.wType, f, 0, 0, y, yStride}, TokenSet{nullptr, gateArgs.yRows, cnt});
    return;
  }
  // Without a session's cache, gate and up would convert into the same shared scratch: use a local one.
  ActivationCache local;
  MatmulIdArgs ga = gateArgs, ua = upArgs;
  if (!ga.cache)
    ga.cache = ua.cache = &local;
  const Product pg = idProduct(op, ga, group), pu = idProduct(op, ua, group);
  // Units over (expert, row range) of f, experts with the most tokens first (as matmulIdBatch); a range is
  // one panel when either weight takes the panel path, so both run their usual kernels over it.
  std::vector<int32_t> order(pg.sets.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t l, int32_t r) {
    return pg.sets[static_cast<size_t>(l)].count > pg.sets[static_cast<size_t>(r)].count;
  });
  const int64_t rpu = rowsPerUnit(2 * f * static_cast<int64_t>(pg.sets.size()), group.size());
  std::vector<Unit> units;
  for (int32_t si : order) {
    const int64_t c = pg.sets[static_cast<size_t>(si)].count;
    const bool panel = usePanels(pg.kn, c, ga) || usePanels(pu.kn, c, ua);
    const int64_t step = panel ? kPanelRows : rpu;
    for (int64_t r = 0; r < f; r += step)
      units.push_back({0, si, panel, r, std::min(f, r + step)});
  }
  std::vector<std::vector<float>> bufs(static_cast<size_t>(group.slots())); // helpers of other groups too
  group.parallelDynamic(static_cast<int64_t>(units.size()), [&](int64_t u, int thread) {
    const Unit &un = units[static_cast<size_t>(u)];
    const size_t si = static_cast<size_t>(un.set);
    const TokenSet &ts = pg.sets[si];
    const int64_t width = un.r1 - un.r0;
    std::vector<float> &buf = bufs[static_cast<size_t>(thread)];
    buf.resize(static_cast<size_t>(2 * ts.count * width));
    float *g = buf.data(), *up = g + ts.count * width;
    // The unit's gate and up outputs, token after token, in a unit-wide scratch (col0 = r0).
    const TokenSet rows{ts.xIdx, nullptr, ts.count};
    auto part = [&](const Product &p, const MatmulOptions &opts, float *dst) {
      Operands o = p.o;
      o.y = dst;
      o.yStride = static_cast<size_t>(width);
      if (un.panel && usePanels(p.kn, ts.count, opts))
        runPanel(o, p.weights[si], un.r0 / kPanelRows, p.acts, rows, p.kn, group, thread, un.r0);
      else
        runRows(o, p.weights[si], un.r0, un.r1, p.acts, rows, p.kn, un.r0);
    };
    part(pg, ga, g);
    part(pu, ua, up);
    for (int64_t i = 0; i < ts.count; ++i)
      glu(fn, g + i * width, up + i * width, y + static_cast<size_t>(ts.yAt(i)) * yStride + un.r0, width);
  });
}

void matmulIdColumns(const MatmulIdArgs &a, int64_t yRowCount, const ColumnConsumer &consume, ThreadGroup &group) {
  const char *op = "matmul_id by columns";
  checkIdArgs(op, a);
  if (a.f32Reference)
    fail(op, "the float32 reference runs the steps unfused");
  for (int64_t i = 0; i < a.count; ++i)
    if (a.yRows[i] >= yRowCount)
      fail(op, "output row " + std::to_string(a.yRows[i]) + " at position " + std::to_string(i) + " is past the " +
                   std::to_string(yRowCount) + " rows");
  const int64_t n = a.n;
  if (n == 0)
    return;
  // Column ranges of whole panels: wide enough that a decode step is a few units per thread, narrow enough
  // that the scratch (every row of y over the range) stays in the core's L2 at a prompt's thousands of rows.
  constexpr int64_t kScratchFloats = 64 << 10;
  const int64_t byWork = n / (4 * static_cast<int64_t>(group.slots()));
  const int64_t byCache = kScratchFloats / std::max<int64_t>(1, yRowCount);
  const int64_t width = std::max<int64_t>(kPanelRows, std::min(byWork, byCache) / kPanelRows * kPanelRows);
  const int64_t units = (n + width - 1) / width;
  std::vector<std::vector<float>> bufs(static_cast<size_t>(group.slots())); // helpers of other groups too
  if (a.count == 0 || a.k == 0) { // no products, or empty partial sums: zeros in every entry's row
    std::vector<float> &buf = bufs[0];
    buf.assign(static_cast<size_t>(yRowCount * width), 0.0f);
    for (int64_t c0 = 0; c0 < n; c0 += width)
      consume(buf.data(), static_cast<size_t>(width), c0, std::min(n, c0 + width));
    return;
  }
  const Product p = idProduct(op, a, group);
  group.parallelDynamic(units, [&](int64_t u, int thread) {
    const int64_t c0 = u * width, c1 = std::min(n, c0 + width);
    std::vector<float> &buf = bufs[static_cast<size_t>(thread)];
    buf.resize(static_cast<size_t>(yRowCount * width));
    Operands o = p.o;
    o.y = buf.data();
    o.yStride = static_cast<size_t>(width);
    for (size_t si = 0; si < p.sets.size(); ++si) {
      const TokenSet &ts = p.sets[si];
      if (usePanels(p.kn, ts.count, a))
        for (int64_t pn = c0 / kPanelRows; pn * kPanelRows < c1; ++pn)
          runPanel(o, p.weights[si], pn, p.acts, ts, p.kn, group, thread, c0);
      else
        runRows(o, p.weights[si], c0, c1, p.acts, ts, p.kn, c0);
    }
    consume(buf.data(), static_cast<size_t>(width), c0, c1);
  });
}

} // namespace tpc::rt::cpu
