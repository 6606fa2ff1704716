//===- Dispatch.cpp - the CUDA session's step loop and op entries ----------===//
//
// The op entries of the CUDA backend (STYLE.md §5, third layer): each step's operands are bound to
// device addresses and shapes exactly as the CPU executor binds them, then unpacked into a launcher's
// argument struct (runStep: one flat switch over OpKind). One host thread drives every logical device
// (runSteps): it runs each device's steps up to the next collective (launches are asynchronous, so devices
// overlap), then issues the collective for all of them in one call (Collectives.cpp, through
// exec::CollectiveRunner). Step parameters are read through StepParams.h. Data movement (views, slices,
// concats, same-dtype copies) is cudaMemcpy2DAsync. Each step goes through runFused first (Fusion.cpp),
// which runs it alone here when no fused group starts at it.
//
// Host placement (`--override-tensor REGEX=cpu`, `--no-kv-offload`): host weight slices stay in host
// memory, host activations live in a pinned host arena at the plan's offsets, host KV caches in mapped
// pinned memory (device attention reads them over the bus). Host steps run on the CPU backend's
// exec::HostStepRunner (runHostStep) after the device stream has drained the copies they read; copies
// across are cudaMemcpyAsync. A plan with host steps runs without CUDA graphs, and no fusion reaches
// across a host step.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Attention.cuh"
#include "runtime/cuda/DeltaNet.cuh"
#include "runtime/cuda/Elementwise.cuh"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/plan/StepParams.h"

#include <fmt/core.h>

#include <chrono>

namespace tpc::rt::cuda {

using exec::KvBuffers;
using exec::TensorRef;

Expected<void> CudaSession::runSteps(int64_t t) {
  const int first = devices().front();
  std::vector<size_t> at(devs.size(), 0); // by plan device
  for (Device &dev : devs) {
    dev.xqOf = nullptr;
    dev.routeOf = nullptr;
  }
  // Profiling times the first device's steps (a fused group counts under its first step), synchronising
  // after each.
  auto timed = [&](size_t step, std::chrono::steady_clock::time_point t0) {
    if (!profiling())
      return;
    TPC_CUDA_CHECK(cudaSetDevice(devs[first].gpu));
    TPC_CUDA_CHECK(cudaStreamSynchronize(devs[first].stream));
    recordStep(step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  for (;;) {
    for (int d : devices()) {
      const std::vector<Step> &steps = plan().devices[d].steps;
      TPC_CUDA_CHECK(cudaSetDevice(devs[d].gpu));
      while (at[d] < steps.size() && !isCollective(steps[at[d]].op)) {
        auto t0 = std::chrono::steady_clock::now();
        size_t done = 1;
        if (devs[d].hostStep[at[d]]) {
          if (Expected<void> ok = runHostStep(d, at[d], t); !ok)
            return Error{fmt::format("device {}: {}", d, ok.message())};
        } else {
          done = runFused(d, at[d], t);
        }
        if (d == first)
          timed(at[d], t0);
        at[d] += done;
      }
    }
    if (at[first] >= plan().devices[first].steps.size())
      return {}; // prepareOpen checked that every device has the same collectives, so all are done
    auto t0 = std::chrono::steady_clock::now();
    if (Expected<void> ok = collective(at, t); !ok)
      return ok;
    timed(at[first], t0);
    for (int d : devices())
      ++at[d];
  }
}

void CudaSession::runStep(size_t d, size_t i, int64_t t) {
  Device &dev = devs[d];
  const Step &s = plan().devices[d].steps[i];
  std::vector<TensorRef> in, out;
  bindStep(d, s, t, in, out);
  // A reshape or copy onto itself writes nothing (the attention output viewed as the o projection's x).
  const bool noop = (s.op == OpKind::Reshape || s.op == OpKind::Copy) && in[0].data == out[0].data;
  if (!noop)
    forgetIfWritten(dev, out);
  const TensorRef &x = in[0];
  const TensorRef &y = out[0];
  cudaStream_t st = dev.stream;
  switch (s.op) {
  case OpKind::GetRows: {
    GetRowsArgs a;
    a.type = typeOf(x);
    a.table = x.data;
    a.rowBytes = rowBytesOf(x);
    a.rows = x.rows();
    a.k = x.inner();
    a.ids = in[1].i();
    a.idOffset = GetRowsParams::read(s).firstId.value_or(0);
    a.count = in[1].numel();
    a.y = y.f();
    launchGetRows(a, st);
    break;
  }
  case OpKind::TakeAlong: {
    TakeAlongArgs a;
    a.x = x.f();
    a.idx = in[1].i();
    a.y = y.f();
    a.rows = in[1].rows();
    a.n = x.inner();
    a.k = in[1].inner();
    launchTakeAlong(a, st);
    break;
  }
  case OpKind::RmsNorm: {
    RmsNormArgs a;
    a.x = x.f();
    a.w = in.size() > 1 ? in[1].f() : nullptr;
    a.y = y.f();
    a.rows = x.rows();
    a.n = x.inner();
    a.eps = RmsNormParams::read(s).eps;
    const bool q = quantizeOutput(d, i, y, t, a.xq, a.xs);
    launchRmsNorm(a, st);
    if (q)
      primeQuantized(dev, y);
    break;
  }
  case OpKind::Matmul: {
    const TensorDesc &wd = plan().devices[d].tensors[s.inputs[1]];
    matmul(dev, x, in[1], y, wd.storage == Storage::Weight ? dev.f16Of[wd.index] : nullptr);
    break;
  }
  case OpKind::MulMatId: {
    const TensorRef &w = in[1], &ids = in[2];
    const int64_t e = w.shape[0], n = w.shape[1], k = x.inner(), count = ids.numel();
    if (count == 0 || n == 0)
      break;
    if (k == 0) {
      TPC_CUDA_CHECK(cudaMemsetAsync(y.data, 0, count * n * sizeof(float), st));
      break;
    }
    GemvArgs a;
    a.type = typeOf(w);
    a.w = w.data;
    a.rowBytes = rowBytesOf(w);
    a.expertStride = a.rowBytes * n;
    a.n = n;
    a.k = k;
    a.experts = e;
    a.x = x.f();
    a.xDiv = x.shape.size() == 3 ? 1 : ids.shape[1];
    a.y = y.f();
    a.count = count;
    a.firstExpert = MulMatIdParams::read(s).firstExpert.value_or(0); // an expert-parallel share's first
    const MoePath path = moePath(a.type, count, e, k);
    if (path == MoePath::PerPair) { // decode: a block row per pair, no routing pass
      a.ids = ids.i();
      quantizedX(dev, a, x.rows());
      launchGemv(a, st);
      break;
    }
    RouteArgs r;
    r.ids = ids.i();
    r.count = count;
    r.experts = e;
    r.firstExpert = a.firstExpert;
    r.offsets = dev.route;
    r.list = dev.route + e + 1;
    r.y = y.f();
    r.n = n;
    if (path == MoePath::RoutedGemm) { // the tile table after the list, its entry count after that
      r.tiles = r.list + count;
      r.tileCount = r.tiles + 2 * tileGemmMaxTiles(count, e);
    }
    // The layer's other expert matmuls on the same ids reuse the grouping; each zeroes its own y's rows of
    // pairs routed elsewhere.
    if (dev.routeOf == r.ids && dev.routeCount == count && dev.routeExperts == e &&
        dev.routeFirst == r.firstExpert && (dev.routeTiles || !r.tiles)) {
      launchZeroForeignPairs(r, st);
    } else {
      launchRouteExperts(r, st);
      dev.routeOf = r.ids;
      dev.routeCount = count, dev.routeExperts = e, dev.routeFirst = r.firstExpert;
      dev.routeTiles = r.tiles != nullptr;
    }
    if (path == MoePath::RoutedGemm) {
      ConvertArgs cv; // activations to f16 once; the GEMM gathers each pair's row
      cv.x = x.data;
      cv.y = dev.xHalf;
      cv.n = x.numel();
      TPC_CUDA_ASSERT(uint64_t(cv.n) * 2 <= dev.xHalfBytes, "mul_mat_id: f16 activations exceed their scratch");
      launchConvert(cv, st);
      TileGemmArgs g;
      g.type = a.type;
      g.w = a.w;
      g.rowBytes = a.rowBytes;
      g.expertStride = a.expertStride;
      g.n = n;
      g.k = k;
      g.x = dev.xHalf;
      g.xDiv = a.xDiv;
      g.y = y.f();
      g.count = count;
      g.list = r.list;
      g.offsets = r.offsets;
      g.tiles = r.tiles;
      g.tileCount = r.tileCount;
      g.maxTiles = tileGemmMaxTiles(count, e);
      launchTileGemm(g, st);
      break;
    }
    a.list = r.list;
    a.offsets = r.offsets;
    quantizedX(dev, a, x.rows());
    launchGemv(a, st);
    break;
  }
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div: {
    const TensorRef &b = in[1];
    BinaryArgs a;
    a.op = s.op == OpKind::Add ? BinaryOp::Add : s.op == OpKind::Mul ? BinaryOp::Mul : BinaryOp::Div;
    a.a = x.f();
    a.b = b.f();
    a.y = y.f();
    a.rank = static_cast<int>(x.shape.size());
    const int ra = a.rank, rb = static_cast<int>(b.shape.size());
    int64_t stride = 1;
    for (int i = 0; i < ra; ++i)
      a.shape[i] = x.shape[i];
    for (int j = rb - 1; j >= 0; --j) {
      if (b.shape[j] != 1)
        a.bStride[j + (ra - rb)] = stride;
      stride *= b.shape[j];
    }
    launchBinary(a, st);
    break;
  }
  case OpKind::Scale:
  case OpKind::Unary:
  case OpKind::Softcap: {
    MapArgs a;
    a.kind = s.op == OpKind::Scale     ? MapKind::Scale
             : s.op == OpKind::Softcap ? MapKind::Softcap
                                       : MapKind::Unary;
    a.fn = s.op == OpKind::Unary ? UnaryParams::read(s).fn : UnaryFn::Silu;
    a.v = s.op == OpKind::Scale     ? ScaleParams::read(s).value
          : s.op == OpKind::Softcap ? SoftcapParams::read(s).cap
                                    : 0.0f;
    a.x = x.f();
    a.y = y.f();
    a.n = x.numel();
    launchMap(a, st);
    break;
  }
  case OpKind::AddId: {
    AddIdArgs a;
    a.x = x.f();
    a.b = in[1].f();
    a.ids = in[2].i();
    a.y = y.f();
    a.rows = x.shape[0] * x.shape[1];
    a.n = x.shape[2];
    a.experts = in[1].shape[0];
    a.firstExpert = AddIdParams::read(s).firstExpert.value_or(0);
    launchAddId(a, st);
    break;
  }
  case OpKind::Glu: {
    GluArgs a;
    a.fn = GluParams::read(s).fn;
    a.f = y.inner();
    a.rows = y.rows();
    a.gStride = in.size() > 1 ? a.f : 2 * a.f;
    a.g = x.f();
    a.u = in.size() > 1 ? in[1].f() : x.f() + a.f;
    a.y = y.f();
    const bool q = quantizeOutput(d, i, y, t, a.xq, a.xs);
    launchGlu(a, st);
    if (q)
      primeQuantized(dev, y);
    break;
  }
  case OpKind::Softmax: {
    SoftmaxArgs a;
    a.x = x.f();
    a.y = y.f();
    a.rows = x.rows();
    a.n = x.inner();
    launchSoftmax(a, st);
    break;
  }
  case OpKind::TopK: {
    TopKArgs a;
    a.x = x.f();
    a.y = y.i();
    a.rows = x.rows();
    a.n = x.inner();
    a.k = TopKParams::read(s).k;
    launchTopK(a, st);
    break;
  }
  case OpKind::Sum: {
    SumArgs a;
    a.x = x.f();
    a.y = y.f();
    exec::splitAxis(x.shape, SumParams::read(s).axis, a.outer, a.dim, a.inner);
    launchSum(a, st);
    break;
  }
  case OpKind::Reshape:
  case OpKind::Copy:
    copy(dev, x, y);
    break;
  case OpKind::Permute: {
    PermuteArgs a;
    a.x = x.data;
    a.y = y.data;
    a.elemBytes = static_cast<int>(dtypeBytes(x.dtype));
    a.rank = static_cast<int>(x.shape.size());
    const std::vector<int64_t> perm = PermuteParams::read(s).perm;
    std::vector<int64_t> xs(a.rank, 1);
    for (int i = a.rank - 1; i > 0; --i)
      xs[i - 1] = xs[i] * x.shape[i];
    for (int i = 0; i < a.rank; ++i) {
      a.yShape[i] = y.shape[i];
      a.srcStride[i] = xs[perm[i]];
    }
    launchPermute(a, st);
    break;
  }
  case OpKind::View:
  case OpKind::Slice: {
    const NarrowParams p = NarrowParams::read(s);
    narrow(dev, x.data, y.data, x.shape, y.shape[p.axis], p.axis, p.offset, dtypeBytes(x.dtype), false);
    break;
  }
  case OpKind::Concat: {
    const int64_t axis = AxisParams::read(s).axis;
    int64_t at = 0;
    for (const TensorRef &part : in) {
      narrow(dev, part.data, y.data, y.shape, part.shape[axis], axis, at, dtypeBytes(y.dtype), true);
      at += part.shape[axis];
    }
    break;
  }
  case OpKind::Rope: {
    RopeArgs a;
    a.x = x.f();
    a.y = y.f();
    a.pos = in[1].i();
    a.freqFactors = in.size() > 2 ? in[2].f() : nullptr;
    a.t = x.shape[0];
    a.h = x.shape[1];
    a.d = x.shape[2];
    const RopeParams p = RopeParams::read(s);
    a.mode = static_cast<RopeMode>(p.mode); // the plan's codes are the kernel's
    a.nDims = p.nDims;
    a.base = p.base;
    a.freqScale = p.freqScale;
    setRopeYarn(p, a);
    launchRope(a, st);
    break;
  }
  case OpKind::Attention: {
    const AttentionParams p = AttentionParams::read(s);
    const KvBuffers &kv = dev.kv[p.kvCache];
    AttentionArgs a;
    a.q = x.f();
    a.k = in[1].f();
    a.v = in[2].f();
    a.pos = in[3].i();
    a.seq = kv.seq;
    // q, k, v, pos [, sinks] [, gate]: the gate is last.
    a.gate = p.gated ? in.back().f() : nullptr;
    a.sinks = in.size() > (p.gated ? 5u : 4u) ? in[4].f() : nullptr;
    a.kc = kv.k;
    a.vc = kv.v;
    auto storage = [](GGMLType t) {
      return t == GGMLType::F32    ? KvStorage::F32
             : t == GGMLType::Q8_0 ? KvStorage::Q8_0
             : t == GGMLType::Q4_0 ? KvStorage::Q4_0
                                   : KvStorage::F16;
    };
    a.typeK = storage(kv.desc.typeK), a.typeV = storage(kv.desc.typeV);
    a.t = x.shape[0];
    a.hq = x.shape[1];
    a.hkv = in[1].shape[1];
    a.dk = x.shape[2];
    a.dv = in[2].shape[2];
    a.ctx = kv.ctx;
    a.scale = p.scale;
    a.softcap = p.softcap;
    a.window = p.window;
    a.qHead0 = p.qHead0;
    a.group = p.group;
    a.y = y.f();
    const bool q = a.dv % 32 == 0 && quantizeOutput(d, i, y, t, a.xq, a.xs);
    launchAttention(a, st);
    if (q)
      primeQuantized(dev, y);
    break;
  }
  case OpKind::SsmConv: {
    // The recurrent cache's K half is the conv state; positions and sequence ids are read on the GPU.
    const KvBuffers &kv = dev.kv[SsmConvParams::read(s).kvCache];
    SsmConvArgs a;
    a.x = x.f();
    a.w = in[1].f();
    a.y = y.f();
    a.t = x.rows();
    a.c = x.inner();
    a.k = in[1].inner();
    a.pos = in[2].i();
    a.seq = kv.seq;
    a.convState = static_cast<float *>(kv.k);
    a.sequences = kv.sequences;
    TPC_CUDA_ASSERT(in[1].rows() == a.c && kv.desc.convRows == a.k - 1 && kv.desc.convChannels == a.c,
                    "ssm_conv: the weight or the conv state does not match the input's channels");
    launchSsmConv(a, st);
    break;
  }
  case OpKind::DeltaNet: {
    // The recurrent cache's V half is the delta-rule state.
    const DeltaNetParams p = DeltaNetParams::read(s);
    const KvBuffers &kv = dev.kv[p.kvCache];
    DeltaNetArgs a;
    a.q = x.f();
    a.k = in[1].f();
    a.v = in[2].f();
    a.g = in[3].f();
    a.beta = in[4].f();
    a.y = y.f();
    a.t = x.shape[0];
    a.hk = x.shape[1];
    a.dk = x.shape[2];
    a.hv = in[2].shape[1];
    a.dv = in[2].shape[2];
    a.scale = p.scale;
    a.pos = in[5].i();
    a.seq = kv.seq;
    a.state = static_cast<float *>(kv.v);
    a.sequences = kv.sequences;
    TPC_CUDA_ASSERT(kv.desc.nHeadKv == a.hv && kv.desc.headDimK == a.dk && kv.desc.headDimV == a.dv,
                    "delta_net: the state does not match the heads");
    launchDeltaNet(a, st);
    break;
  }
  case OpKind::L2Norm: {
    L2NormArgs a;
    a.x = x.f();
    a.y = y.f();
    a.rows = x.rows();
    a.n = x.inner();
    a.eps = RmsNormParams::read(s).eps;
    launchL2Norm(a, st);
    break;
  }
  case OpKind::GatedRmsNorm: {
    GatedRmsNormArgs a;
    a.x = x.f();
    a.w = in[1].f();
    a.z = in[2].f();
    a.y = y.f();
    a.rows = x.rows();
    a.n = x.inner();
    a.eps = RmsNormParams::read(s).eps;
    const bool q = quantizeOutput(d, i, y, t, a.xq, a.xs); // the output projection's x, as rms_norm's
    launchGatedRmsNorm(a, st);
    if (q)
      primeQuantized(dev, y);
    break;
  }
  case OpKind::ExpertCombine: {
    ExpertCombineArgs a;
    a.x = x.f();
    a.nm = static_cast<int>(in.size()) - 1;
    for (int i = 0; i < a.nm; ++i)
      a.m[i] = in[i + 1].f();
    a.y = y.f();
    a.t = x.shape[0];
    a.k = x.shape[1];
    a.n = x.shape[2];
    launchExpertCombine(a, st);
    break;
  }
  case OpKind::AllReduce:
  case OpKind::ReduceScatter:
  case OpKind::AllGather:
  case OpKind::AllReduceRmsNorm:
    throw CudaError("collective reached runStep"); // runSteps hands them to collective()
  case OpKind::Send:
  case OpKind::Recv:
    throw CudaError("stage transfer reached runStep"); // open refuses pipeline plans (CudaBackend.cpp)
  }
}

/// A host-placed step (the CPU backend's runner, on host memory), or a copy between host and device memory.
Expected<void> CudaSession::runHostStep(size_t d, size_t i, int64_t t) {
  const DevicePlan &dp = plan().devices[d];
  const Step &s = dp.steps[i];
  Device &dev = devs[d];
  std::vector<TensorRef> in, out;
  bindStep(d, s, t, in, out);
  const bool fromHost = tensorPlacement(dp, s.inputs[0]) == Placement::Host;
  if (s.op == OpKind::Copy && (!fromHost || s.placement == Placement::Device)) {
    // Device -> host or host -> device, in stream order. The host arena is pinned, so both are
    // asynchronous; a host step that reads (or overwrites) these bytes first waits for the stream.
    const uint64_t bytes = uint64_t(in[0].numel()) * dtypeBytes(in[0].dtype);
    if (bytes)
      TPC_CUDA_CHECK(cudaMemcpyAsync(out[0].data, in[0].data, bytes,
                                     fromHost ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, dev.stream));
    dev.hostSync = true;
    forgetIfWritten(dev, out);
    return {};
  }
  if (dev.hostSync) {
    TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    dev.hostSync = false;
  }
  return hostRunner->run(s, in, out, dev.kvHost);
}

void CudaSession::matmul(Device &dev, const TensorRef &x, const TensorRef &w, const TensorRef &y,
                         const void *wF16) {
  const int64_t m = x.rows(), k = x.inner(), n = w.rows();
  if (m == 0 || n == 0)
    return;
  if (m < copts.cublasMinRows || k == 0 || !dev.wTile) {
    GemvArgs a;
    a.type = typeOf(w);
    a.w = w.data;
    a.rowBytes = rowBytesOf(w);
    a.n = n;
    a.k = k;
    a.x = x.f();
    a.y = y.f();
    a.count = m;
    quantizedX(dev, a, m);
    launchGemv(a, dev.stream);
    return;
  }
  // Prefill: activations to f16 once, weight rows to f16 tile by tile, cuBLAS with f32 accumulation.
  ConvertArgs cv;
  cv.x = x.data;
  cv.y = dev.xHalf;
  cv.n = m * k;
  launchConvert(cv, dev.stream);
  const int64_t tile = wF16 ? n : std::max<int64_t>(1, dev.tileElems / k);
  const float one = 1, zero = 0;
  for (int64_t n0 = 0; n0 < n; n0 += tile) {
    const int64_t rows = std::min(tile, n - n0);
    if (wF16) { // the cached f16 copy: no dequantization per call
      TPC_CUBLAS_CHECK(cublasGemmEx(
          dev.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
          &one, wF16, CUDA_R_16F, static_cast<int>(k), dev.xHalf, CUDA_R_16F, static_cast<int>(k), &zero,
          y.f(), CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    DequantArgs dq;
    dq.type = typeOf(w);
    dq.w = w.data;
    dq.rowBytes = rowBytesOf(w);
    dq.row0 = n0;
    dq.rows = rows;
    dq.k = k;
    dq.out = dev.wTile;
    launchDequantF16(dq, dev.stream);
    // Column-major view: y^T[n, m] = W[n, k] · x^T[k, m], i.e. C = A^T B with A = W^T (k x n, ld k).
    TPC_CUBLAS_CHECK(cublasGemmEx(
        dev.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(m), static_cast<int>(k),
        &one, dev.wTile, CUDA_R_16F, static_cast<int>(k), dev.xHalf, CUDA_R_16F, static_cast<int>(k), &zero,
        y.f() + n0, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void CudaSession::copy(Device &dev, const TensorRef &x, const TensorRef &y) {
  const int64_t n = x.numel();
  if (n == 0)
    return;
  if (x.dtype == y.dtype) {
    if (x.data != y.data)
      TPC_CUDA_CHECK(
          cudaMemcpyAsync(y.data, x.data, n * dtypeBytes(x.dtype), cudaMemcpyDeviceToDevice, dev.stream));
    return;
  }
  ConvertArgs a;
  a.toHalf = y.dtype == DType::F16;
  a.x = x.data;
  a.y = y.data;
  a.n = n;
  launchConvert(a, dev.stream);
}

/// `whole` is the shape of the larger tensor and `size` the part's extent along `axis`. insert = false:
/// y (the part) = x (the whole) narrowed to [offset, offset + size); insert = true: x (the dense part) is
/// written into y (the whole) at offset.
void CudaSession::narrow(Device &dev, const void *x, void *y, const std::vector<int64_t> &whole, int64_t size,
                         int64_t axis, int64_t offset, size_t es, bool insert) {
  int64_t outer, dim, inner;
  exec::splitAxis(whole, axis, outer, dim, inner);
  const size_t width = size * inner * es, wide = dim * inner * es;
  if (width == 0 || outer == 0)
    return;
  const uint8_t *src = static_cast<const uint8_t *>(x);
  uint8_t *dst = static_cast<uint8_t *>(y);
  if (insert) { // x is the dense part, y the whole
    dst += offset * inner * es;
    if (src == dst && (outer == 1 || width == wide))
      return;
    TPC_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, wide, src, width, width, outer, cudaMemcpyDeviceToDevice, dev.stream));
  } else {
    src += offset * inner * es;
    if (src == dst && (outer == 1 || width == wide))
      return; // an output view that already is the narrowed input
    TPC_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, width, src, wide, width, outer, cudaMemcpyDeviceToDevice, dev.stream));
  }
}

} // namespace tpc::rt::cuda
