//===- Fusion.cpp - run-time fusion and the quantized-x cache of the CUDA session -===//
//
// The session walks each device's steps and runs as one kernel what is one computation, matching steps
// by their tensor wiring, never by names (see docs/architecture.md, "Fusion at run time"):
//   runFused        residual add + rms_norm (rmsNormKernel with r / sum, both written), else one of:
//   groupedMatmul   consecutive decode matmuls on one x with one weight type (Q, K, V; gate, up), and
//                   mul_mat_id steps on one x and ids (the experts' gate and up), as parts of one launch
//   routeChain      the MoE router softmax -> top_k -> take_along -> sum -> div (routeTopKKernel)
//   normRope        the Q and K ropes of a layer, each with its per-head rms_norm in front where the model
//                   has one (normRopeKernel); parts that would write what the other reads stay separate
// The integer decode GEMV reads x quantized to 8 bits per 32 elements. Each device keeps one quantized
// copy and which x it holds (quantizedX makes it on demand); an rms_norm, gated_rms_norm, glu or attention
// (gated or not: the gate is applied first) whose output an integer GEMV within the next few steps reads
// writes that copy itself (quantizeOutput, primeQuantized), and any step that writes over the held x
// forgets it (forgetIfWritten; checked by address range). The recurrent ops write their state outside
// the activations, which no quantized copy is made from.
// Collectives and new calls forget it too. CudaOptions::fuse = false (TPC_CUDA_NO_FUSE=1) runs every step
// alone; no fused group spans a host-side step (Device::hostNear).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Attention.cuh"
#include "runtime/cuda/Elementwise.cuh"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/plan/StepParams.h"

namespace tpc::rt::cuda {

using exec::TensorRef;

/// Runs step i of device d, or steps i, i + 1, ... as one kernel where that is the same computation (see
/// docs/architecture.md, "Fusion at run time"): residual add + rms_norm here, and the groups that
/// groupedMatmul, routeChain and normRope recognise. Returns the steps done.
size_t CudaSession::runFused(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan().devices[d].steps;
  const Step &s = steps[i];
  if (devs[d].hostNear[i]) { // a fused group must not take a host step onto the GPU
    runStep(d, i, t);
    return 1;
  }
  if (copts.fuse && s.op == OpKind::Add && i + 1 < steps.size() && steps[i + 1].op == OpKind::RmsNorm &&
      steps[i + 1].inputs[0] == s.outputs[0]) {
    std::vector<TensorRef> in, out, nin, nout;
    bindStep(d, s, t, in, out);
    bindStep(d, steps[i + 1], t, nin, nout);
    if (in[0].shape == in[1].shape && in[0].shape == out[0].shape && nout[0].numel() == out[0].numel()) {
      Device &dev = devs[d];
      forgetIfWritten(dev, out);
      forgetIfWritten(dev, nout);
      RmsNormArgs a;
      a.x = in[0].f();
      a.r = in[1].f();
      a.sum = out[0].f();
      a.w = nin.size() > 1 ? nin[1].f() : nullptr;
      a.y = nout[0].f();
      a.rows = nout[0].rows();
      a.n = nout[0].inner();
      a.eps = RmsNormParams::read(steps[i + 1]).eps;
      const bool q = quantizeOutput(d, i + 1, nout[0], t, a.xq, a.xs);
      launchRmsNorm(a, dev.stream);
      if (q)
        primeQuantized(dev, nout[0]);
      return 2;
    }
  }
  if (copts.fuse && (s.op == OpKind::Matmul || s.op == OpKind::MulMatId))
    if (const size_t n = groupedMatmul(d, i, t))
      return n;
  if (copts.fuse && s.op == OpKind::Softmax)
    if (const size_t n = routeChain(d, i, t))
      return n;
  if (copts.fuse && (s.op == OpKind::RmsNorm || s.op == OpKind::Rope))
    if (const size_t n = normRope(d, i, t))
      return n;
  runStep(d, i, t);
  return 1;
}

/// Decode matmuls i, i + 1, ... on the same x with weights of one type as one launch (GemvArgs parts);
/// likewise mul_mat_id steps on the same x and ids with weights of one type and shape (gate, up).
/// Returns the steps done, 0 where fewer than two qualify.
size_t CudaSession::groupedMatmul(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan().devices[d].steps;
  const Step &first = steps[i];
  const bool ids = first.op == OpKind::MulMatId;
  std::vector<TensorRef> in, out;
  bindStep(d, first, t, in, out);
  const TensorRef x = in[0];
  const std::vector<int64_t> wShape = in[1].shape;
  GemvArgs a;
  a.type = typeOf(in[1]);
  a.rowBytes = rowBytesOf(in[1]);
  a.k = x.inner();
  a.x = x.f();
  if (ids) {
    const TensorRef &id = in[2];
    if (id.numel() == 0 || id.numel() > kPairGridMax || wShape.size() != 3)
      return 0;
    a.experts = wShape[0];
    a.expertStride = a.rowBytes * wShape[1];
    a.xDiv = x.shape.size() == 3 ? 1 : id.shape[1];
    a.count = id.numel();
    a.ids = id.i();
    a.firstExpert = MulMatIdParams::read(first).firstExpert.value_or(0);
  } else {
    a.count = x.rows();
    if (a.count >= copts.cublasMinRows)
      return 0;
  }
  if (!gemvCanGroup(a))
    return 0;
  size_t j = i;
  for (; j < steps.size() && j - i < size_t(GemvArgs::kMaxParts); ++j) {
    const Step &s = steps[j];
    if (s.op != first.op || s.inputs[0] != first.inputs[0] ||
        (ids && (s.inputs[2] != first.inputs[2] ||
                 MulMatIdParams::read(s).firstExpert.value_or(0) != a.firstExpert)))
      break;
    if (j > i)
      bindStep(d, s, t, in, out);
    if (typeOf(in[1]) != a.type || in[1].inner() != a.k || in[1].rows() == 0 ||
        (ids && in[1].shape != wShape))
      break;
    a.wPart[j - i] = in[1].data;
    a.yPart[j - i] = out[0].f();
    a.nPart[j - i] = ids ? wShape[1] : in[1].rows();
  }
  if (j - i < 2)
    return 0;
  Device &dev = devs[d];
  for (int q = 0; q < int(j - i); ++q)
    forgetIfWritten(dev, {bind(d, steps[i + q].outputs[0], t)});
  a.parts = static_cast<int>(j - i);
  a.w = a.wPart[0];
  a.y = a.yPart[0];
  a.n = a.nPart[0];
  quantizedX(dev, a, x.rows());
  launchGemv(a, dev.stream);
  return j - i;
}

/// The MoE router chain softmax -> top_k -> take_along -> sum -> div (normalized weights) of steps i..i+4,
/// wired exactly so, as one kernel. Returns 5, or 0 where the steps are not that chain.
size_t CudaSession::routeChain(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan().devices[d].steps;
  if (i + 5 > steps.size())
    return 0;
  const Step &sm = steps[i], &tk = steps[i + 1], &ta = steps[i + 2], &su = steps[i + 3], &dv = steps[i + 4];
  const int32_t p = sm.outputs[0];
  if (tk.op != OpKind::TopK || ta.op != OpKind::TakeAlong || su.op != OpKind::Sum || dv.op != OpKind::Div ||
      tk.inputs[0] != p || ta.inputs[0] != p || ta.inputs[1] != tk.outputs[0] ||
      su.inputs[0] != ta.outputs[0] || dv.inputs[0] != ta.outputs[0] || dv.inputs[1] != su.outputs[0])
    return 0;
  const TensorRef x = bind(d, sm.inputs[0], t), pr = bind(d, p, t), ids = bind(d, tk.outputs[0], t),
                  w = bind(d, ta.outputs[0], t), sum = bind(d, su.outputs[0], t),
                  wn = bind(d, dv.outputs[0], t);
  const int64_t rows = x.rows(), n = x.inner(), k = TopKParams::read(tk).k;
  // Rows of n logits; the sum over the last axis of [rows, k]; the div by a [rows, 1] column.
  if (n > kRouteMaxExperts || k < 1 || k > n || ids.numel() != rows * k || w.numel() != rows * k ||
      wn.numel() != rows * k || sum.numel() != rows || w.shape.size() != 2 ||
      SumParams::read(su).axis != int64_t(w.shape.size()) - 1 || pr.numel() != rows * n)
    return 0;
  Device &dev = devs[d];
  forgetIfWritten(dev, {pr, ids, w, sum, wn});
  RouteTopKArgs a;
  a.x = x.f();
  a.p = pr.f();
  a.ids = ids.i();
  a.w = w.f();
  a.s = sum.f();
  a.wn = wn.f();
  a.rows = rows;
  a.n = n;
  a.k = k;
  launchRouteTopK(a, dev.stream);
  return 5;
}

/// Up to two rope steps with the same positions and frequencies (Q, K), each optionally preceded by the
/// per-head rms_norm that feeds it (steps: norm, norm, rope, rope; or rope, rope; or norm, rope), as one
/// kernel. Returns the steps done, 0 where the steps are not that.
size_t CudaSession::normRope(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan().devices[d].steps;
  size_t j = i;
  std::vector<size_t> norms, ropes;
  while (j < steps.size() && norms.size() < 2 && steps[j].op == OpKind::RmsNorm)
    norms.push_back(j++);
  while (j < steps.size() && ropes.size() < 2 && steps[j].op == OpKind::Rope)
    ropes.push_back(j++);
  if (ropes.empty() || (!norms.empty() && norms.size() != ropes.size()) || norms.size() + ropes.size() < 2)
    return 0;
  const Step &r0 = steps[ropes[0]];
  const RopeParams p0 = RopeParams::read(r0);
  NormRopeArgs a;
  std::vector<TensorRef> in, out, nin, nout, written;
  std::vector<std::vector<TensorRef>> reads(ropes.size()), writes(ropes.size());
  for (size_t q = 0; q < ropes.size(); ++q) {
    const Step &r = steps[ropes[q]];
    const RopeParams p = RopeParams::read(r);
    bindStep(d, r, t, in, out);
    if (in[0].shape.size() != 3 || r.inputs[1] != r0.inputs[1] || r.inputs.size() != r0.inputs.size() ||
        (r.inputs.size() > 2 && r.inputs[2] != r0.inputs[2]) || p.mode != p0.mode || p.nDims != p0.nDims ||
        !p.sameAngles(p0))
      return 0;
    if (q == 0) {
      a.rope.pos = in[1].i();
      a.rope.freqFactors = in.size() > 2 ? in[2].f() : nullptr;
      a.rope.t = in[0].shape[0];
      a.rope.d = in[0].shape[2];
      a.rope.mode = static_cast<RopeMode>(p.mode); // the plan's codes are the kernel's
      a.rope.nDims = p.nDims;
      a.rope.base = p.base;
      a.rope.freqScale = p.freqScale;
      setRopeYarn(p, a.rope);
    } else if (in[0].shape[0] != a.rope.t || in[0].shape[2] != a.rope.d) {
      return 0;
    }
    NormRopePart &pt = a.part[q];
    pt.x = in[0].f();
    pt.y = out[0].f();
    pt.h = in[0].shape[1];
    written.push_back(out[0]);
    reads[q].push_back(in[0]);
    writes[q].push_back(out[0]);
    if (!norms.empty()) {
      const Step &nm = steps[norms[q]];
      if (nm.outputs[0] != r.inputs[0])
        return 0;
      bindStep(d, nm, t, nin, nout);
      if (nin[0].inner() != a.rope.d || nin[0].numel() != in[0].numel())
        return 0;
      pt.norm = true;
      pt.x = nin[0].f();
      pt.w = nin.size() > 1 ? nin[1].f() : nullptr;
      pt.eps = RmsNormParams::read(nm).eps;
      pt.normed = nout[0].f();
      written.push_back(nout[0]);
      reads[q].push_back(nin[0]);
      writes[q].push_back(nout[0]);
    }
  }
  // The parts run side by side: neither may write what the other reads (two steps in place on one x).
  auto overlap = [](const TensorRef &u, const TensorRef &v) {
    const uint8_t *a0 = static_cast<const uint8_t *>(u.data), *b0 = static_cast<const uint8_t *>(v.data);
    return a0 < b0 + v.numel() * dtypeBytes(v.dtype) && b0 < a0 + u.numel() * dtypeBytes(u.dtype);
  };
  for (size_t p = 0; p < ropes.size(); ++p)
    for (size_t q = 0; q < ropes.size(); ++q)
      if (p != q)
        for (const TensorRef &w : writes[p])
          for (const TensorRef &r : reads[q])
            if (overlap(w, r))
              return 0;
  if (a.rope.d > 1024 || a.rope.nDims % 2 != 0 || a.rope.nDims > a.rope.d)
    return 0;
  a.parts = static_cast<int>(ropes.size());
  Device &dev = devs[d];
  forgetIfWritten(dev, written);
  launchNormRope(a, dev.stream);
  return j - i;
}

void CudaSession::quantizedX(Device &dev, GemvArgs &a, int64_t rows) {
  if (!gemvUsesIntDot(a))
    return;
  if (dev.xqOf != a.x || dev.xqHeld != rows * a.k) {
    TPC_CUDA_ASSERT(rows * a.k <= dev.xqElems, "quantized activations exceed their scratch");
    launchQuantizeX(a.x, rows, a.k, dev.xq, dev.xs, dev.stream);
    dev.xqOf = a.x;
    dev.xqHeld = rows * a.k;
  }
  a.xq = dev.xq;
  a.xs = dev.xs;
}

/// Whether step i's output y (an rms_norm or glu row set) should also be written quantized: one of the
/// next few steps is a matmul on y that runs the integer decode GEMV (a float one, such as an f32 router,
/// may come first). Then xq/xs point at the device's copy.
bool CudaSession::quantizeOutput(size_t d, size_t i, const TensorRef &y, int64_t t, int8_t *&xq,
                                 XQBlock *&xs) {
  constexpr size_t kLookahead = 8;
  const std::vector<Step> &steps = plan().devices[d].steps;
  const Device &dev = devs[d];
  // Past kPairGridMax tokens the integer GEMVs run only for a routed mul_mat_id, which quantizes its x
  // itself: do not look.
  if (!copts.fuse || dev.hostNear[i] || t > kPairGridMax || y.inner() % 32 != 0 || y.numel() > dev.xqElems)
    return false;
  std::vector<TensorRef> in, out;
  for (size_t j = i + 1; j < steps.size() && j <= i + kLookahead && !isCollective(steps[j].op); ++j) {
    const Step &nx = steps[j];
    if (nx.op != OpKind::Matmul && nx.op != OpKind::MulMatId)
      continue;
    bindStep(d, nx, t, in, out);
    // y itself or a view of it (the attention output reshaped to rows of heads x dims)
    if (in[0].data != y.data || in[0].numel() != y.numel() || in[0].inner() % 32 != 0)
      continue;
    GemvArgs probe;
    probe.type = typeOf(in[1]);
    probe.k = in[0].inner();
    static const int32_t someIds = 0; // only "ids or not" matters to the probe
    if (nx.op == OpKind::Matmul) {
      probe.count = in[0].rows();
      if (probe.count >= copts.cublasMinRows)
        return false;
    } else {
      probe.count = in[2].numel();
      const MoePath path = moePath(probe.type, probe.count, in[1].shape[0], probe.k);
      probe.ids = path == MoePath::PerPair ? &someIds : nullptr;
      probe.list = path == MoePath::RoutedGemv ? &someIds : nullptr;
    }
    if (gemvUsesIntDot(probe)) {
      xq = dev.xq;
      xs = dev.xs;
      return true;
    }
  }
  return false;
}

/// Records that the device's quantized copy holds y (written by a fused producer).
void CudaSession::primeQuantized(Device &dev, const TensorRef &y) {
  dev.xqOf = y.f();
  dev.xqHeld = y.numel();
}

/// Forgets the device's quantized x, and its expert grouping, when a step writes over the x or the ids they
/// were made from (the matmuls that read them again reuse them until then).
void CudaSession::forgetIfWritten(Device &dev, const std::vector<TensorRef> &outs) {
  auto overlaps = [&](const void *p, uint64_t bytes) {
    const uint8_t *lo = static_cast<const uint8_t *>(p), *hi = lo + bytes;
    for (const TensorRef &o : outs) {
      const uint8_t *b = static_cast<const uint8_t *>(o.data), *e = b + o.numel() * dtypeBytes(o.dtype);
      if (b < hi && lo < e)
        return true;
    }
    return false;
  };
  if (dev.xqOf && overlaps(dev.xqOf, uint64_t(dev.xqHeld) * 4))
    dev.xqOf = nullptr;
  if (dev.routeOf && overlaps(dev.routeOf, uint64_t(dev.routeCount) * 4))
    dev.routeOf = nullptr;
}

} // namespace tpc::rt::cuda
