//===- StepChecks.cpp - operand checks for every op -------------------------===//
//
// checkStep() runs when a session opens, for one token and for max_batch tokens, on the bound operands of
// every step: shapes, dtypes and parameters must fit the op so that the kernels (which do not check) can
// index freely, and a bad plan becomes one clear error instead of a crash or a hang at a collective.
// Parameters are read through StepParams.h.
//===----------------------------------------------------------------------===//
#include "runtime/exec/StepChecks.h"

#include "runtime/exec/Binding.h"
#include "runtime/ggml/Quant.h"
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

namespace tpc::rt::exec {

namespace {
std::string shapeStr(const TensorRef &t) { return fmt::format("[{}]", fmt::join(t.shape, ",")); }

/// f32 data: an activation, or an f32 weight (norm weights, biases, freq factors read in place).
bool isF32(const TensorRef &t) { return t.dtype == DType::F32 && (!t.isWeight || t.wtype == GGMLType::F32); }
bool isI32(const TensorRef &t) { return t.dtype == DType::I32 && (!t.isWeight || t.wtype == GGMLType::I32); }
/// Readable as f32 rows: an f32 tensor or a weight of a type the format layer dequantizes (a backend
/// refuses the types its kernels lack in its own checks).
bool isRows(const TensorRef &t) { return isF32(t) || (t.isWeight && supportsDequantize(t.wtype)); }

/// A weight whose ggml type is the tensor's own dtype, so its bytes can be copied as is.
bool plainWeight(const TensorRef &t) {
  return (t.wtype == GGMLType::F32 && t.dtype == DType::F32) ||
         (t.wtype == GGMLType::F16 && t.dtype == DType::F16) ||
         (t.wtype == GGMLType::I32 && t.dtype == DType::I32);
}

/// b broadcasts to a right-aligned.
bool broadcasts(const TensorRef &a, const TensorRef &b) {
  if (b.shape.size() > a.shape.size())
    return false;
  for (size_t j = 0; j < b.shape.size(); ++j) {
    int64_t bd = b.shape[b.shape.size() - 1 - j], ad = a.shape[a.shape.size() - 1 - j];
    if (bd != ad && bd != 1)
      return false;
  }
  return true;
}
} // namespace

std::string checkStep(const Step &s, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      const std::vector<KvCache> &kv) {
  if (isStageTransfer(s.op)) { // one operand, any dtype, never a weight (it is read or written whole)
    const std::vector<TensorRef> &moved = s.op == OpKind::Send ? in : out;
    if (moved.size() != 1 || (s.op == OpKind::Send ? out : in).size() != 0 || moved[0].isWeight)
      return fmt::format("{}: moves one activation ({} inputs, {} outputs)", opKindName(s.op), in.size(),
                         out.size());
    return "";
  }
  const TensorRef &x = in[0];
  const TensorRef &y = out[0];
  auto bad = [&](const std::string &what) {
    return fmt::format("{}: {} (inputs {}, output {})", opKindName(s.op), what, shapeStr(x), shapeStr(y));
  };
  for (const TensorRef &o : out)
    if (o.isWeight)
      return bad("writes a weight");
  auto sameShape = [](const TensorRef &a, const TensorRef &b) { return a.numel() == b.numel(); };
  auto axisOk = [&](const TensorRef &t, int64_t axis) { return axis >= 0 && axis < int64_t(t.shape.size()); };
  switch (s.op) {
  case OpKind::GetRows:
    if (!isRows(x) || !isI32(in[1]) || !isF32(y) || y.numel() != in[1].numel() * x.inner())
      return bad("needs table rows, i32 ids and an f32 output of ids x row");
    return "";
  case OpKind::TakeAlong:
    if (!isF32(x) || !isI32(in[1]) || !isF32(y) || y.numel() != in[1].numel() || x.rows() != in[1].rows())
      return bad("needs f32 x[T,N], i32 idx[T,k], f32 y[T,k]");
    return "";
  case OpKind::RmsNorm:
    if (!isF32(x) || !isF32(y) || !sameShape(x, y) || (in.size() > 1 && in[1].numel() != x.inner()) ||
        (in.size() > 1 && !isF32(in[1])))
      return bad("needs f32 x, y of the same shape and an optional f32 weight of the row size");
    return "";
  case OpKind::Matmul:
    if (!isF32(x) || !isRows(in[1]) || !isF32(y) || x.inner() != in[1].inner() ||
        y.numel() != x.rows() * in[1].rows())
      return bad(
          fmt::format("needs f32 x[..,K], w[N,K] of a supported type, y[..,N]; w is {}", shapeStr(in[1])));
    return "";
  case OpKind::MulMatId: {
    const TensorRef &w = in[1], &ids = in[2];
    if (!isF32(x) || !isRows(w) || w.shape.size() != 3 || !isI32(ids) || ids.shape.size() != 2 || !isF32(y))
      return bad("needs f32 x, w[E,N,K], i32 ids[T,k]");
    bool perSlot = x.shape.size() == 3;
    if (x.inner() != w.shape[2] || x.shape[0] != ids.shape[0] || (perSlot && x.shape[1] != ids.shape[1]) ||
        y.numel() != ids.numel() * w.shape[1])
      return bad("x must be [T,K] or [T,k,K] matching ids[T,k] and w[E,N,K], y [T,k,N]");
    return "";
  }
  case OpKind::AddId: {
    const TensorRef &b = in[1], &ids = in[2];
    if (!isF32(x) || x.shape.size() != 3 || !isF32(b) || b.shape.size() != 2 || !isI32(ids) ||
        ids.shape.size() != 2 || !isF32(y) || !sameShape(x, y))
      return bad("needs f32 x[T,k,N], f32 b[E,N], i32 ids[T,k], y like x");
    if (b.shape[1] != x.shape[2] || ids.shape[0] != x.shape[0] || ids.shape[1] != x.shape[1])
      return bad(fmt::format("b {} and ids {} must match x [T,k,N]", shapeStr(b), shapeStr(ids)));
    return "";
  }
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div:
    if (!isF32(x) || !isF32(in[1]) || !isF32(y) || !sameShape(x, y) || !broadcasts(x, in[1]))
      return bad(fmt::format("rhs {} must broadcast (right-aligned) to lhs", shapeStr(in[1])));
    return "";
  case OpKind::Scale:
  case OpKind::Softmax:
  case OpKind::Softcap:
    if (!isF32(x) || !isF32(y) || !sameShape(x, y))
      return bad("needs f32 input and output of the same size");
    if (s.op == OpKind::Softcap && !(SoftcapParams::read(s).cap > 0))
      return bad("cap must be > 0");
    return "";
  case OpKind::Unary:
  case OpKind::Glu: {
    const int64_t fn = static_cast<int64_t>(UnaryParams::read(s).fn);
    if (fn < 0 || fn > static_cast<int64_t>(UnaryFn::SwigluOai) ||
        (s.op == OpKind::Unary && fn == static_cast<int64_t>(UnaryFn::SwigluOai)))
      return bad(fmt::format("unknown function {}", fn));
    if (!isF32(x) || !isF32(y))
      return bad("needs f32 operands");
    if (s.op == OpKind::Unary && !sameShape(x, y))
      return bad("input and output sizes differ");
    if (s.op == OpKind::Glu && in.size() == 1 && (x.inner() != 2 * y.inner() || x.rows() != y.rows()))
      return bad("one operand must be [.., 2F] for an output [.., F]");
    if (s.op == OpKind::Glu && in.size() == 2 && (!sameShape(x, in[1]) || !sameShape(x, y) || !isF32(in[1])))
      return bad("gate, up and output must have the same size");
    return "";
  }
  case OpKind::TopK: {
    const int64_t k = TopKParams::read(s).k;
    if (!isF32(x) || !isI32(y) || k <= 0 || k > x.inner() || y.numel() != x.rows() * k)
      return bad(fmt::format("k={} needs f32 x[..,N >= k] and i32 y[..,k]", k));
    return "";
  }
  case OpKind::Sum: {
    const int64_t axis = SumParams::read(s).axis;
    if (!isF32(x) || !isF32(y) || !axisOk(x, axis))
      return bad(fmt::format("axis {} out of range", axis));
    int64_t outer, dim, inner;
    splitAxis(x.shape, axis, outer, dim, inner);
    if (y.numel() != outer * inner) // also right when the summed axis is empty (the sum is then 0)
      return bad(fmt::format("output size wrong for a sum over axis {}", axis));
    return "";
  }
  case OpKind::Reshape:
  case OpKind::Copy:
    // A copy may read a plain weight (f32/f16/i32 rows, e.g. a mirrored table used as an activation).
    if ((x.isWeight && !plainWeight(x)) || x.numel() != y.numel() ||
        (x.dtype != y.dtype && (x.dtype == DType::I32 || y.dtype == DType::I32)))
      return bad("input and output must have the same element count (and compatible dtypes)");
    return "";
  case OpKind::Permute: {
    const std::vector<int64_t> perm = PermuteParams::read(s).perm;
    if (x.isWeight || perm.size() != x.shape.size() || y.shape.size() != x.shape.size() || x.dtype != y.dtype)
      return bad("perm must list every axis once");
    std::vector<bool> seen(x.shape.size(), false);
    for (size_t i = 0; i < perm.size(); ++i) {
      int64_t a = perm[i];
      if (a < 0 || a >= int64_t(x.shape.size()) || seen[a] || y.shape[i] != x.shape[a])
        return bad(fmt::format("perm [{}] does not map the input shape to the output", fmt::join(perm, ",")));
      seen[a] = true;
    }
    return "";
  }
  case OpKind::View:
  case OpKind::Slice: {
    const NarrowParams p = NarrowParams::read(s);
    const int64_t axis = p.axis, off = p.offset, size = p.size;
    // size 0: a device's empty share of a split dimension.
    if (x.isWeight || !axisOk(x, axis) || y.shape.size() != x.shape.size() || x.dtype != y.dtype || off < 0 ||
        size < 0 || off > x.shape[axis] - size || y.shape[axis] != size)
      return bad(fmt::format("axis {} offset {} size {} outside the input", axis, off, size));
    for (size_t i = 0; i < x.shape.size(); ++i)
      if (int64_t(i) != axis && x.shape[i] != y.shape[i])
        return bad("other dims must match");
    return "";
  }
  case OpKind::Concat: {
    int64_t axis = AxisParams::read(s).axis, total = 0;
    if (!axisOk(y, axis))
      return bad(fmt::format("axis {} out of range", axis));
    for (const TensorRef &t : in) {
      if (t.isWeight || t.dtype != y.dtype || t.shape.size() != y.shape.size())
        return bad("inputs must have the output's rank and dtype");
      for (size_t i = 0; i < t.shape.size(); ++i)
        if (int64_t(i) != axis && t.shape[i] != y.shape[i])
          return bad("inputs differ from the output off the concat axis");
      total += t.shape[axis];
    }
    if (total != y.shape[axis])
      return bad("sizes along the axis do not add up");
    return "";
  }
  case OpKind::Rope: {
    const RopeParams p = RopeParams::read(s);
    const int64_t mode = static_cast<int64_t>(p.mode), nDims = p.nDims;
    if (!isF32(x) || !isF32(y) || x.shape.size() != 3 || !sameShape(x, y) || !isI32(in[1]) ||
        in[1].numel() != x.shape[0] || (mode != 0 && mode != 1) || nDims <= 0 || nDims % 2 ||
        nDims > x.shape[2])
      return bad(fmt::format("needs f32 x[T,H,D], i32 pos[T], mode 0|1 (got {}), even n_dims <= D (got {})",
                             mode, nDims));
    if (in.size() > 2 && (!isF32(in[2]) || in[2].numel() < nDims / 2))
      return bad("freq_factors needs n_dims/2 f32 values");
    if (!(p.base > 0))
      return bad("base must be > 0");
    if (p.extFactor != 0 && (p.origCtx < 1 || p.base == 1 || !(p.freqScale > 0) || !(p.betaFast > 0) ||
                             !(p.betaSlow > 0)))
      return bad("YaRN needs origCtx >= 1, base != 1 and positive freqScale, betaFast, betaSlow");
    return "";
  }
  case OpKind::Attention: {
    const TensorRef &k = in[1], &v = in[2], &pos = in[3];
    const AttentionParams p = AttentionParams::read(s);
    const KvCache &c = kv[p.kvCache];
    if (!isF32(x) || !isF32(k) || !isF32(v) || !isI32(pos) || !isF32(y) || x.shape.size() != 3 ||
        k.shape.size() != 3 || v.shape.size() != 3)
      return bad("needs f32 q[T,Hq,Dk], k[T,Hkv,Dk], v[T,Hkv,Dv], i32 pos[T]");
    const int64_t t = x.shape[0], hq = x.shape[1], hkv = k.shape[1];
    // With group > 0 the local query heads are heads qHead0.. of the model over all its KV heads.
    const bool headsOk = p.group > 0 ? p.qHead0 >= 0 && p.qHead0 + hq <= p.group * hkv
                                     : (hkv == 0 ? hq == 0 : hq % hkv == 0);
    if (k.shape[0] != t || v.shape[0] != t || pos.numel() != t || v.shape[1] != hkv ||
        k.shape[2] != x.shape[2] || !headsOk || y.numel() != t * hq * v.shape[2])
      return bad("q/k/v/pos/output shapes disagree (Hq must be a multiple of Hkv, 0 when Hkv is 0; with a "
                 "query-head offset, within group x Hkv heads)");
    if (hkv != c.nHeadKv || k.shape[2] != c.headDimK || v.shape[2] != c.headDimV)
      return bad(fmt::format("k/v do not match kv cache {} ({} heads, dims {}/{})", p.kvCache, c.nHeadKv,
                             c.headDimK, c.headDimV));
    const size_t nIn = in.size() - (p.gated ? 1 : 0);
    if (nIn < 4 || nIn > 5)
      return bad(fmt::format("{} inputs, expected q, k, v, pos [, sinks]{}", in.size(), p.gated ? ", gate" : ""));
    if (nIn > 4 && (!isF32(in[4]) || in[4].numel() != hq))
      return bad("sinks must be f32 [Hq]");
    if (c.kind != CacheKind::Attention)
      return bad(fmt::format("cache {} is not an attention cache", p.kvCache));
    if (p.gated && (!isF32(in.back()) || !sameShape(in.back(), y)))
      return bad("the gate must be f32 of the output's shape");
    if (p.window < 0)
      return bad("sliding window must be >= 0");
    return "";
  }
  case OpKind::SsmConv: {
    const TensorRef &w = in[1];
    const KvCache &c = kv[SsmConvParams::read(s).kvCache];
    if (!isF32(x) || !isF32(w) || !isF32(y) || x.shape.size() != 2 || w.shape.size() != 2 || !sameShape(x, y) ||
        !isI32(in[2]) || in[2].numel() != x.shape[0])
      return bad("needs f32 x[T,C], w[C,K], i32 pos[T] and y[T,C]");
    if (c.kind != CacheKind::Recurrent || x.shape[1] != c.convChannels || w.shape[0] != c.convChannels ||
        w.shape[1] != c.convRows + 1)
      return bad(fmt::format("x/w do not match recurrent cache {} ({} channels, kernel {})",
                             SsmConvParams::read(s).kvCache, c.convChannels, c.convRows + 1));
    return "";
  }
  case OpKind::DeltaNet: {
    const TensorRef &k = in[1], &v = in[2], &g = in[3], &beta = in[4];
    const KvCache &c = kv[DeltaNetParams::read(s).kvCache];
    if (!isF32(x) || !isF32(k) || !isF32(v) || !isF32(g) || !isF32(beta) || !isF32(y) || x.shape.size() != 3 ||
        k.shape.size() != 3 || v.shape.size() != 3 || !isI32(in[5]) || in[5].numel() != x.shape[0])
      return bad("needs f32 q[T,Hk,Dk], k[T,Hk,Dk], v[T,Hv,Dv], g[T,Hv], beta[T,Hv], i32 pos[T]");
    const int64_t t = x.shape[0], hk = x.shape[1], hv = v.shape[1];
    if (k.shape != x.shape || v.shape[0] != t || g.numel() != t * hv || beta.numel() != t * hv ||
        (hk == 0 ? hv != 0 : hv % hk != 0) || y.numel() != v.numel())
      return bad("q/k/v/g/beta/output shapes disagree (Hv must be a multiple of Hk)");
    if (c.kind != CacheKind::Recurrent || hv != c.nHeadKv || x.shape[2] != c.headDimK || v.shape[2] != c.headDimV)
      return bad(fmt::format("q/v do not match recurrent cache {} ({} value heads, dims {}/{})",
                             DeltaNetParams::read(s).kvCache, c.nHeadKv, c.headDimK, c.headDimV));
    return "";
  }
  case OpKind::L2Norm:
    if (!isF32(x) || !isF32(y) || !sameShape(x, y))
      return bad("needs f32 x and y of the same shape");
    return "";
  case OpKind::GatedRmsNorm:
    if (!isF32(x) || !isF32(in[1]) || !isF32(in[2]) || !isF32(y) || !sameShape(x, y) || !sameShape(x, in[2]) ||
        in[1].numel() != x.inner())
      return bad("needs f32 x, z and y of one shape and an f32 weight of the row size");
    return "";
  case OpKind::ExpertCombine: {
    if (!isF32(x) || x.shape.size() != 3 || !isF32(y) || y.numel() != x.shape[0] * x.shape[2])
      return bad("needs f32 x[T,k,N] and y[T,N]");
    for (size_t i = 1; i < in.size(); ++i)
      if (!isF32(in[i]) || in[i].numel() != x.shape[0] * x.shape[1])
        return bad(fmt::format("multiplier {} must be f32 [T,k]", i));
    return "";
  }
  case OpKind::AllReduceRmsNorm: {
    const AllReduceRmsNormParams p = AllReduceRmsNormParams::read(s);
    const bool hasR = p.residual, hasW = p.weight;
    const TensorRef &n = out[1];
    if (!isF32(x) || !isF32(y) || !isF32(n) || !sameShape(x, y) || !sameShape(x, n))
      return bad("needs f32 x, y and n of the same shape");
    if (hasR && (!isF32(in[1]) || !sameShape(in[1], x)))
      return bad("the residual must be f32 with x's shape");
    if (hasW && (!isF32(in.back()) || in.back().numel() != x.inner()))
      return bad("the norm weight must be f32 of the row size");
    return "";
  }
  case OpKind::AllReduce:
    for (size_t i = 0; i < in.size(); ++i)
      if (!isF32(in[i]) || !isF32(out[i]) || in[i].numel() != out[i].numel())
        return bad(fmt::format("operand {} must be f32 with an output of the same size", i));
    return "";
  case OpKind::ReduceScatter:
  case OpKind::AllGather: {
    const int64_t axis = AxisParams::read(s).axis;
    if (!isF32(x) || !isF32(y) || !axisOk(x, axis) || x.shape.size() != y.shape.size())
      return bad(fmt::format("needs f32 operands of equal rank and axis {} in range", axis));
    for (size_t i = 0; i < x.shape.size(); ++i)
      if (int64_t(i) != axis && x.shape[i] != y.shape[i])
        return bad("dims off the axis must match");
    return "";
  }
  }
  return bad("unknown op");
}

std::string checkDeviceSteps(const Plan &plan, size_t d, int64_t t, int64_t rows) {
  const DevicePlan &dp = plan.devices[d];
  std::vector<TensorRef> in, out;
  for (size_t s = 0; s < dp.steps.size(); ++s) {
    const Step &st = dp.steps[s];
    bindOperands(dp, {}, st, t, rows, in, out);
    if (std::string e = checkStep(st, in, out, dp.kv); !e.empty())
      return fmt::format("device {} step {} '{}' ({} tokens): {}", d, s, st.name, t, e);
  }
  return "";
}

namespace {
/// checkCollectives for the devices [first, first + n) of one pipeline stage (the only ones that meet).
std::string checkStageCollectives(const Plan &plan, size_t first, size_t n, int64_t t, int64_t rows) {
  auto bind = [&](size_t d, int32_t id, int64_t tokens) {
    return bindTensor(plan.devices[first + d], {}, id, tokens, rows);
  };
  std::vector<std::vector<const Step *>> seq(n);
  for (size_t d = 0; d < n; ++d)
    for (const Step &s : plan.devices[first + d].steps)
      if (isCollective(s.op))
        seq[d].push_back(&s);
  for (size_t k = 0; k < seq[0].size(); ++k) {
    const Step &s0 = *seq[0][k];
    auto err = [&](const std::string &what) {
      return fmt::format("collective {} ({} '{}', {} tokens){}: {}", k, opKindName(s0.op), s0.name, t,
                         plan.stages > 1 ? fmt::format(" of stage {}", stageOf(plan, first)) : "", what);
    };
    std::vector<TensorRef> xs, ys;
    for (size_t d = 0; d < n; ++d) {
      if (k >= seq[d].size())
        return err(fmt::format("device {} has only {} collectives", first + d, seq[d].size()));
      const Step &s = *seq[d][k];
      if (s.ints != s0.ints)
        return err(fmt::format("device {} uses different parameters than device 0", d));
      if (s.inputs.size() != s0.inputs.size())
        return err(
            fmt::format("device {} reduces {} tensors, device 0 {}", d, s.inputs.size(), s0.inputs.size()));
      if (s.op != s0.op)
        return err(fmt::format("device {} runs {} here", d, opKindName(s.op)));
      if (s0.op == OpKind::AllReduce || s0.op == OpKind::AllReduceRmsNorm) {
        for (size_t i = 0; i < s.inputs.size(); ++i)
          if (bind(d, s.inputs[i], t).numel() != bind(0, s0.inputs[i], t).numel())
            return err(fmt::format("tensor {} has a different size on device {}", i, d));
      }
      xs.push_back(bind(d, s.inputs[0], t));
      ys.push_back(bind(d, s.outputs[0], t));
    }
    if (s0.op == OpKind::AllReduce || s0.op == OpKind::AllReduceRmsNorm)
      continue;
    const int64_t axis = AxisParams::read(s0).axis;
    const std::vector<TensorRef> &parts = s0.op == OpKind::AllGather ? xs : ys;
    const std::vector<TensorRef> &whole = s0.op == OpKind::AllGather ? ys : xs;
    int64_t total = 0;
    for (size_t d = 0; d < n; ++d) {
      total += parts[d].shape[axis];
      std::vector<int64_t> a = whole[d].shape, b = whole[0].shape, c = parts[d].shape;
      a[axis] = b[axis] = c[axis] = 0;
      if (a != b || a != c)
        return err(fmt::format("device {} disagrees on the dims off axis {}", d, axis));
      if (whole[d].shape[axis] != whole[0].shape[axis])
        return err(fmt::format("device {} has a different full size along axis {}", d, axis));
    }
    if (total != whole[0].shape[axis])
      return err(fmt::format("the devices' parts add up to {} along axis {}, the full tensor has {}", total,
                             axis, whole[0].shape[axis]));
  }
  return "";
}
} // namespace

std::string checkCollectives(const Plan &plan, int64_t t, int64_t rows) {
  const size_t per = devicesPerStage(plan);
  for (size_t first = 0; per > 0 && first < plan.devices.size(); first += per)
    if (std::string e = checkStageCollectives(plan, first, per, t, rows); !e.empty())
      return e;
  return "";
}

std::vector<std::pair<int64_t, int64_t>> checkedCallSizes(const Plan &plan) {
  const int64_t maxRows = plan.model.maxOutputRows > 0 ? plan.model.maxOutputRows : plan.model.maxBatch;
  return {{1, 1}, {plan.model.maxBatch, maxRows}};
}

} // namespace tpc::rt::exec
