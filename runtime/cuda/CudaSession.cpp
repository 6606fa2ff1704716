//===- CudaSession.cpp - arenas, weight upload and the step loop on GPUs ----===//
//
// The op entries of the CUDA backend (STYLE.md §5, third layer): each step's operands are bound to
// device addresses and shapes exactly as the CPU executor binds them, then unpacked into a launcher's
// argument struct. One host thread drives every logical device: it runs each device's steps up to the
// next collective (launches are asynchronous, so devices overlap), then issues the collective for all of
// them, ordered by events (loopback) or by the streams (NCCL). Data movement (views, slices, concats,
// same-dtype copies) is cudaMemcpy2DAsync.
//
// Host placement (`--override-tensor REGEX=cpu`, `--no-kv-offload`): host weight slices stay in host
// memory, host activations live in a pinned host arena at the plan's offsets, host KV caches in mapped
// pinned memory (device attention reads them over the bus). Host steps run on the CPU kernels
// (exec::runLocalStep) after the device stream has drained the copies they read; copies across are
// cudaMemcpyAsync. A plan with host steps runs without CUDA graphs, and no fusion reaches across a host step.
//
// Scratch per device (one allocation with the I/O buffers): the f16 weight tile and f16 activations of
// the cuBLAS path, the expert routing lists of MUL_MAT_ID and the staging buffer of the reduce-scatter /
// all-gather collectives, each sized from the plan's steps at max_batch.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaSession.h"

#include "runtime/cuda/Attention.cuh"
#include "runtime/cuda/Collective.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/Elementwise.cuh"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/cuda/Nccl.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

namespace tpc::rt::cuda {

using exec::KvBuffers;
using exec::TensorRef;

namespace {

#define TPC_CUBLAS_CHECK(expr)                                                                               \
  do {                                                                                                       \
    cublasStatus_t st_ = (expr);                                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                        \
      throw CudaError(std::string(#expr) + ": " + cublasGetStatusString(st_));                               \
  } while (0)

constexpr uint64_t kAlign = 256;
/// mul_mat_id with at most this many (token, slot) pairs (decode) runs one block row per pair.
constexpr int64_t kPairGridMax = 16;
uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// One cudaMalloc, freed on its GPU.
struct GpuAlloc {
  uint8_t *p = nullptr;
  uint64_t size = 0;
  int gpu = 0;
  GpuAlloc() = default;
  GpuAlloc(const GpuAlloc &) = delete;
  GpuAlloc &operator=(const GpuAlloc &) = delete;
  GpuAlloc(GpuAlloc &&o) noexcept : p(o.p), size(o.size), gpu(o.gpu) { o.p = nullptr; }
  ~GpuAlloc() {
    if (p) {
      cudaSetDevice(gpu);
      cudaFree(p);
    }
  }
  cudaError_t allocate(int g, uint64_t bytes) {
    gpu = g;
    size = bytes;
    void *q = nullptr;
    cudaError_t e = cudaMalloc(&q, std::max<uint64_t>(bytes, kAlign));
    p = static_cast<uint8_t *>(q);
    return e;
  }
};

/// Pinned host memory.
struct HostAlloc {
  void *p = nullptr;
  HostAlloc() = default;
  HostAlloc(const HostAlloc &) = delete;
  HostAlloc &operator=(const HostAlloc &) = delete;
  HostAlloc(HostAlloc &&o) noexcept : p(o.p) { o.p = nullptr; }
  ~HostAlloc() {
    if (p)
      cudaFreeHost(p);
  }
};

/// Sizes of one device's scratch parts (bytes), from its steps at max_batch.
struct ScratchPlan {
  uint64_t wTile = 0, xHalf = 0, route = 0, stage = 0;
  int64_t tileElems = 0; ///< elements of the f16 weight tile
  int64_t xqElems = 0;   ///< activation elements the integer decode GEMV may quantize at once
};

struct Device {
  int gpu = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t ev = nullptr;
  GpuAlloc weights, acts, kvMem, scratch, f16;
  std::vector<uint64_t> sliceOffset; ///< where each weight slice lives in `weights` (256-aligned)
  std::vector<void *> f16Of;         ///< the cached f16 copy of each weight slice (null: none)
  std::vector<KvBuffers> kv;
  std::vector<void *> ptr;
  int32_t *tokens = nullptr, *positions = nullptr;
  float *logits = nullptr;
  void *wTile = nullptr, *xHalf = nullptr;
  int32_t *route = nullptr;
  float *stage = nullptr;
  int64_t tileElems = 0;
  // x quantized for the integer decode GEMV (launchQuantizeX), and which x it holds: the matmuls that
  // follow on the same x (Q, K, V; gate, up) reuse it. Any other step forgets it (it may write x).
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
  int64_t xqElems = 0;
  const float *xqOf = nullptr;
  int64_t xqHeld = 0; ///< elements of xqOf (whole 32-blocks in row-major order: any row length reads them)
  // Host placement (see the file comment).
  HostAlloc hostActs, hostKv;         ///< pinned; hostKv also mapped into the device's address space
  std::unique_ptr<uint8_t[]> hostWeights;
  std::vector<uint8_t> hostStep;      ///< per step: touchesHost (runs on the host or copies across)
  std::vector<uint8_t> hostNear;      ///< per step: a host-side step within the fusion lookahead
  bool hostSync = false;              ///< the stream has copies touching host memory since the last sync
};

/// Steps a fused group may span from its first step (the quantized-output lookahead is the longest).
constexpr size_t kFuseReach = 9;

/// True for a step that runs on the host or copies from or to host memory.
bool touchesHost(const DevicePlan &dp, const Step &s) {
  return s.placement == Placement::Host ||
         (s.op == OpKind::Copy && !s.inputs.empty() && tensorPlacement(dp, s.inputs[0]) == Placement::Host);
}

bool isWeightOperand(const Step &s, size_t i) {
  return (s.op == OpKind::Matmul || s.op == OpKind::MulMatId) ? i == 1 : (s.op == OpKind::GetRows && i == 0);
}

GGMLType typeOf(const TensorRef &w) { return w.isWeight ? w.wtype : GGMLType::F32; }
uint64_t rowBytesOf(const TensorRef &w) {
  return w.isWeight ? *ggmlRowBytes(w.wtype, static_cast<uint64_t>(w.inner())) : w.inner() * 4;
}

} // namespace

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cudaDeviceName(int gpu) {
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, gpu);
  if (e != cudaSuccess)
    return cudaGetErrorString(e);
  return fmt::format("{}, {:.1f} GiB, sm_{}{}", p.name, p.totalGlobalMem / double(1ull << 30), p.major,
                     p.minor);
}

struct CudaSession::Impl {
  Plan plan;
  CudaOptions copts;
  int64_t ctx = 0;
  std::vector<Device> devs;
  bool loopback = true; ///< every logical device on one GPU
  std::unique_ptr<NcclComms> nccl;
  int32_t logitsTensor = -1;
  HostAlloc hostIo; ///< tokens, positions, logits rows
  cudaGraphExec_t graph = nullptr;
  bool profiling = false;
  std::vector<StepProfile> prof;
  std::string failure;

  ~Impl() {
    if (graph)
      cudaGraphExecDestroy(graph);
    for (Device &d : devs) {
      cudaSetDevice(d.gpu);
      if (d.blas)
        cublasDestroy(d.blas);
      if (d.ev)
        cudaEventDestroy(d.ev);
      if (d.stream)
        cudaStreamDestroy(d.stream);
    }
  }

  TensorRef bind(size_t d, int32_t id, int64_t t) const {
    return exec::bindTensor(plan.devices[d], devs[d].ptr, id, t);
  }
  void bindStep(size_t d, const Step &s, int64_t t, std::vector<TensorRef> &in,
                std::vector<TensorRef> &out) const {
    exec::bindOperands(plan.devices[d], devs[d].ptr, s, t, in, out);
  }

  std::unique_ptr<cpu::ThreadGroup> hostThreads; ///< for host-placed steps (null: the plan has none)

  std::string checkAll(int64_t t) const;
  ScratchPlan scratchFor(size_t d) const;
  void runStep(size_t d, size_t i, int64_t t);
  size_t runFused(size_t d, size_t i, int64_t t);
  size_t groupedMatmul(size_t d, size_t i, int64_t t);
  size_t routeChain(size_t d, size_t i, int64_t t);
  size_t normRope(size_t d, size_t i, int64_t t);
  bool quantizeOutput(size_t d, size_t i, const TensorRef &y, int64_t t, int8_t *&xq, XQBlock *&xs);
  void primeQuantized(Device &dev, const TensorRef &y);
  void forgetIfWritten(Device &dev, const std::vector<TensorRef> &outs);
  void matmul(Device &dev, const TensorRef &x, const TensorRef &w, const TensorRef &y, const void *wF16);
  void quantizedX(Device &dev, GemvArgs &a, int64_t rows);
  void copy(Device &dev, const TensorRef &x, const TensorRef &y);
  void narrow(Device &dev, const void *x, void *y, const std::vector<int64_t> &xShape, int64_t ySize,
              int64_t axis, int64_t offset, size_t es, bool insert);
  void allReduce(const std::vector<std::vector<const float *>> &in,
                 const std::vector<std::vector<float *>> &out, const std::vector<int64_t> &counts);
  void collective(const std::vector<size_t> &at, int64_t t);
  void runSteps(int64_t t);
  void runChunk(int64_t t);
  void runHostStep(size_t d, size_t i, int64_t t);
};

std::string CudaSession::Impl::checkAll(int64_t t) const {
  std::vector<TensorRef> in, out;
  const size_t n = devs.size();
  for (size_t d = 0; d < n; ++d)
    for (size_t si = 0; si < plan.devices[d].steps.size(); ++si) {
      const Step &s = plan.devices[d].steps[si];
      bindStep(d, s, t, in, out);
      auto err = [&](const std::string &e) {
        return fmt::format("device {} step {} '{}' ({} tokens): {}", d, si, s.name, t, e);
      };
      if (std::string e = exec::checkStep(s, in, out, devs[d].kv); !e.empty())
        return err(e);
      if (touchesHost(plan.devices[d], s)) { // the CPU kernels run it, or a copy across
        if (s.op == OpKind::Copy && in[0].dtype != out[0].dtype)
          return err("a copy between host and device must keep its dtype; recompile the plan");
        continue;
      }
      // What the CPU backend allows but these kernels do not.
      for (size_t i = 0; i < in.size(); ++i)
        if (isWeightOperand(s, i) && in[i].isWeight && !cudaSupportsType(in[i].wtype))
          return err(
              fmt::format("weight '{}' is {}, which the CUDA backend does not read (it reads f32, "
                          "f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K); use --backend cpu",
                          plan.devices[d].weights[plan.devices[d].tensors[s.inputs[i]].index].name,
                          ggmlTypeName(in[i].wtype)));
      if ((s.op == OpKind::Add || s.op == OpKind::Mul || s.op == OpKind::Div || s.op == OpKind::Permute) &&
          in[0].shape.size() > size_t(kMaxRank))
        return err("more than 8 dims");
      if (s.op == OpKind::ExpertCombine && in.size() > 5)
        return err("more than 4 multipliers");
      if (s.op == OpKind::Attention && (in[0].shape[2] > 256 || in[2].shape[2] > 256))
        return err("head dims above 256 are not supported by the CUDA attention kernel");
      if (s.op == OpKind::MulMatId && in[1].shape[0] > 8192)
        return err("more than 8192 experts");
    }
  // Collectives: the k-th of every device must agree in sizes (NCCL and the loopback kernel sum equal
  // counts; the gather/scatter offsets come from the peers' parts).
  std::vector<const std::vector<void *> *> ptrs;
  for (const Device &dev : devs)
    ptrs.push_back(&dev.ptr);
  return exec::checkCollectives(plan, ptrs, t);
}

ScratchPlan CudaSession::Impl::scratchFor(size_t d) const {
  ScratchPlan sp;
  const int64_t t = plan.model.maxBatch;
  std::vector<TensorRef> in, out;
  // The f16 weight tile holds up to 16 Mi elements (32 MiB) of rows, at least 64 rows.
  constexpr int64_t kTileElems = int64_t(16) << 20;
  for (const Step &s : plan.devices[d].steps) {
    if (touchesHost(plan.devices[d], s))
      continue;
    bindStep(d, s, t, in, out);
    if (s.op == OpKind::Matmul && t >= copts.cublasMinRows && in[0].inner() > 0) {
      const int64_t k = in[0].inner(), n = in[1].rows();
      const int64_t rows = std::min<int64_t>(n, std::max<int64_t>(64, kTileElems / k));
      sp.tileElems = std::max(sp.tileElems, rows * k);
      sp.xHalf = std::max<uint64_t>(sp.xHalf, uint64_t(in[0].numel()) * 2);
    } else if (s.op == OpKind::MulMatId) {
      sp.route = std::max<uint64_t>(sp.route, uint64_t(in[1].shape[0] + 1 + in[2].numel()) * 4);
    } else if (s.op == OpKind::ReduceScatter || s.op == OpKind::AllGather) {
      sp.stage = std::max<uint64_t>(sp.stage, uint64_t(in[0].numel()) * 4);
    }
  }
  sp.wTile = uint64_t(sp.tileElems) * 2;
  // The integer decode GEMV runs for one token, or mul_mat_id with at most kPairGridMax pairs (so at
  // most that many tokens): its x at that many tokens bounds the quantized copy.
  const int64_t tq = std::min<int64_t>(t, kPairGridMax);
  for (const Step &s : plan.devices[d].steps)
    if ((s.op == OpKind::Matmul || s.op == OpKind::MulMatId) && !touchesHost(plan.devices[d], s)) {
      bindStep(d, s, tq, in, out);
      sp.xqElems = std::max(sp.xqElems, in[0].numel());
    }
  return sp;
}

void CudaSession::Impl::copy(Device &dev, const TensorRef &x, const TensorRef &y) {
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
void CudaSession::Impl::narrow(Device &dev, const void *x, void *y, const std::vector<int64_t> &whole,
                               int64_t size, int64_t axis, int64_t offset, size_t es, bool insert) {
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

void CudaSession::Impl::matmul(Device &dev, const TensorRef &x, const TensorRef &w, const TensorRef &y,
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

void CudaSession::Impl::quantizedX(Device &dev, GemvArgs &a, int64_t rows) {
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
bool CudaSession::Impl::quantizeOutput(size_t d, size_t i, const TensorRef &y, int64_t t, int8_t *&xq,
                                       XQBlock *&xs) {
  constexpr size_t kLookahead = 8;
  const std::vector<Step> &steps = plan.devices[d].steps;
  const Device &dev = devs[d];
  // The integer GEMV runs for at most kPairGridMax tokens (mul_mat_id's per-pair form; plain matmuls
  // only for one): past that, do not look.
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
      probe.ids = probe.count <= kPairGridMax ? &someIds : nullptr;
    }
    if (gemvUsesIntDot(probe)) {
      xq = dev.xq;
      xs = dev.xs;
      return true;
    }
  }
  return false;
}

/// Forgets the device's quantized x when a step writes over it (the matmuls that read an x again reuse
/// its quantized copy until then).
void CudaSession::Impl::forgetIfWritten(Device &dev, const std::vector<TensorRef> &outs) {
  if (!dev.xqOf)
    return;
  const uint8_t *lo = reinterpret_cast<const uint8_t *>(dev.xqOf), *hi = lo + dev.xqHeld * 4;
  for (const TensorRef &o : outs) {
    const uint8_t *b = static_cast<const uint8_t *>(o.data), *e = b + o.numel() * dtypeBytes(o.dtype);
    if (b < hi && lo < e)
      dev.xqOf = nullptr;
  }
}

/// Records that the device's quantized copy holds y (written by a fused producer).
void CudaSession::Impl::primeQuantized(Device &dev, const TensorRef &y) {
  dev.xqOf = y.f();
  dev.xqHeld = y.numel();
}

/// Runs step i of device d, or steps i, i + 1, ... as one kernel where that is the same computation (see
/// docs/architecture.md, "Fusion at run time"): residual add + rms_norm here, and the groups that
/// groupedMatmul, routeChain and normRope recognise. Returns the steps done.
size_t CudaSession::Impl::runFused(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan.devices[d].steps;
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
      a.eps = steps[i + 1].floats[0];
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

/// Up to two rope steps with the same positions and frequencies (Q, K), each optionally preceded by the
/// per-head rms_norm that feeds it (steps: norm, norm, rope, rope; or rope, rope; or norm, rope), as one
/// kernel. Returns the steps done, 0 where the steps are not that.
size_t CudaSession::Impl::normRope(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan.devices[d].steps;
  size_t j = i;
  std::vector<size_t> norms, ropes;
  while (j < steps.size() && norms.size() < 2 && steps[j].op == OpKind::RmsNorm)
    norms.push_back(j++);
  while (j < steps.size() && ropes.size() < 2 && steps[j].op == OpKind::Rope)
    ropes.push_back(j++);
  if (ropes.empty() || (!norms.empty() && norms.size() != ropes.size()) || norms.size() + ropes.size() < 2)
    return 0;
  const Step &r0 = steps[ropes[0]];
  NormRopeArgs a;
  std::vector<TensorRef> in, out, nin, nout, written;
  std::vector<std::vector<TensorRef>> reads(ropes.size()), writes(ropes.size());
  for (size_t q = 0; q < ropes.size(); ++q) {
    const Step &r = steps[ropes[q]];
    bindStep(d, r, t, in, out);
    if (in[0].shape.size() != 3 || r.inputs[1] != r0.inputs[1] || r.inputs.size() != r0.inputs.size() ||
        (r.inputs.size() > 2 && r.inputs[2] != r0.inputs[2]) || r.ints != r0.ints || r.floats != r0.floats)
      return 0;
    if (q == 0) {
      a.rope.pos = in[1].i();
      a.rope.freqFactors = in.size() > 2 ? in[2].f() : nullptr;
      a.rope.t = in[0].shape[0];
      a.rope.d = in[0].shape[2];
      a.rope.mode = static_cast<int>(r.ints[0]);
      a.rope.nDims = r.ints[1];
      a.rope.base = r.floats[0];
      a.rope.freqScale = r.floats[1];
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
      pt.eps = nm.floats[0];
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

/// The MoE router chain softmax -> top_k -> take_along -> sum -> div (normalized weights) of steps i..i+4,
/// wired exactly so, as one kernel. Returns 5, or 0 where the steps are not that chain.
size_t CudaSession::Impl::routeChain(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan.devices[d].steps;
  if (i + 5 > steps.size())
    return 0;
  const Step &sm = steps[i], &tk = steps[i + 1], &ta = steps[i + 2], &su = steps[i + 3], &dv = steps[i + 4];
  const int32_t p = sm.outputs[0];
  if (tk.op != OpKind::TopK || ta.op != OpKind::TakeAlong || su.op != OpKind::Sum || dv.op != OpKind::Div ||
      tk.inputs[0] != p || ta.inputs[0] != p || ta.inputs[1] != tk.outputs[0] || su.inputs[0] != ta.outputs[0] ||
      dv.inputs[0] != ta.outputs[0] || dv.inputs[1] != su.outputs[0])
    return 0;
  const TensorRef x = bind(d, sm.inputs[0], t), pr = bind(d, p, t), ids = bind(d, tk.outputs[0], t),
                  w = bind(d, ta.outputs[0], t), sum = bind(d, su.outputs[0], t), wn = bind(d, dv.outputs[0], t);
  const int64_t rows = x.rows(), n = x.inner(), k = tk.ints[0];
  // Rows of n logits; the sum over the last axis of [rows, k]; the div by a [rows, 1] column.
  if (n > kRouteMaxExperts || k < 1 || k > n || ids.numel() != rows * k || w.numel() != rows * k ||
      wn.numel() != rows * k || sum.numel() != rows || w.shape.size() != 2 ||
      su.ints[0] != int64_t(w.shape.size()) - 1 || pr.numel() != rows * n)
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

/// Decode matmuls i, i + 1, ... on the same x with weights of one type as one launch (GemvArgs parts);
/// likewise mul_mat_id steps on the same x and ids with weights of one type and shape (gate, up).
/// Returns the steps done, 0 where fewer than two qualify.
size_t CudaSession::Impl::groupedMatmul(size_t d, size_t i, int64_t t) {
  const std::vector<Step> &steps = plan.devices[d].steps;
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
    if (s.op != first.op || s.inputs[0] != first.inputs[0] || (ids && s.inputs[2] != first.inputs[2]))
      break;
    if (j > i)
      bindStep(d, s, t, in, out);
    if (typeOf(in[1]) != a.type || in[1].inner() != a.k || in[1].rows() == 0 || (ids && in[1].shape != wShape))
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

void CudaSession::Impl::runStep(size_t d, size_t i, int64_t t) {
  Device &dev = devs[d];
  const Step &s = plan.devices[d].steps[i];
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
    a.idOffset = s.ints.empty() ? 0 : s.ints[0];
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
    a.eps = s.floats[0];
    const bool q = quantizeOutput(d, i, y, t, a.xq, a.xs);
    launchRmsNorm(a, st);
    if (q)
      primeQuantized(dev, y);
    break;
  }
  case OpKind::Matmul: {
    const TensorDesc &wd = plan.devices[d].tensors[s.inputs[1]];
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
    if (count <= kPairGridMax) { // decode: a block row per pair, no routing pass
      a.ids = ids.i();
      quantizedX(dev, a, x.rows());
      launchGemv(a, st);
      break;
    }
    RouteArgs r;
    r.ids = ids.i();
    r.count = count;
    r.experts = e;
    r.offsets = dev.route;
    r.list = dev.route + e + 1;
    r.y = y.f();
    r.n = n;
    launchRouteExperts(r, st);
    a.list = r.list;
    a.offsets = r.offsets;
    launchGemv(a, st);
    break;
  }
  case OpKind::Add:
  case OpKind::Mul:
  case OpKind::Div: {
    const TensorRef &b = in[1];
    BinaryArgs a;
    a.op = s.op == OpKind::Add ? 0 : s.op == OpKind::Mul ? 1 : 2;
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
    a.kind = s.op == OpKind::Scale ? 0 : s.op == OpKind::Softcap ? 1 : 2;
    a.fn = s.op == OpKind::Unary ? static_cast<int>(s.ints[0]) : 0;
    a.v = s.op == OpKind::Unary ? 0.0f : s.floats[0];
    a.x = x.f();
    a.y = y.f();
    a.n = x.numel();
    launchMap(a, st);
    break;
  }
  case OpKind::Glu: {
    GluArgs a;
    a.fn = static_cast<int>(s.ints[0]);
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
    a.k = s.ints[0];
    launchTopK(a, st);
    break;
  }
  case OpKind::Sum: {
    SumArgs a;
    a.x = x.f();
    a.y = y.f();
    exec::splitAxis(x.shape, s.ints[0], a.outer, a.dim, a.inner);
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
    std::vector<int64_t> xs(a.rank, 1);
    for (int i = a.rank - 1; i > 0; --i)
      xs[i - 1] = xs[i] * x.shape[i];
    for (int i = 0; i < a.rank; ++i) {
      a.yShape[i] = y.shape[i];
      a.srcStride[i] = xs[s.ints[i]];
    }
    launchPermute(a, st);
    break;
  }
  case OpKind::View:
  case OpKind::Slice:
    narrow(dev, x.data, y.data, x.shape, y.shape[s.ints[0]], s.ints[0], s.ints[1], dtypeBytes(x.dtype),
           false);
    break;
  case OpKind::Concat: {
    int64_t at = 0;
    for (const TensorRef &part : in) {
      narrow(dev, part.data, y.data, y.shape, part.shape[s.ints[0]], s.ints[0], at, dtypeBytes(y.dtype),
             true);
      at += part.shape[s.ints[0]];
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
    a.mode = static_cast<int>(s.ints[0]);
    a.nDims = s.ints[1];
    a.base = s.floats[0];
    a.freqScale = s.floats[1];
    launchRope(a, st);
    break;
  }
  case OpKind::Attention: {
    const KvBuffers &kv = dev.kv[s.ints[0]];
    AttentionArgs a;
    a.q = x.f();
    a.k = in[1].f();
    a.v = in[2].f();
    a.pos = in[3].i();
    a.sinks = in.size() > 4 ? in[4].f() : nullptr;
    a.kc = kv.k;
    a.vc = kv.v;
    a.f16 = kv.desc.dtype == DType::F16;
    a.t = x.shape[0];
    a.hq = x.shape[1];
    a.hkv = in[1].shape[1];
    a.dk = x.shape[2];
    a.dv = in[2].shape[2];
    a.ctx = kv.ctx;
    a.scale = s.floats[0];
    a.softcap = s.floats[1];
    a.window = s.ints[1];
    a.y = y.f();
    const bool q = a.dv % 32 == 0 && quantizeOutput(d, i, y, t, a.xq, a.xs);
    launchAttention(a, st);
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
  }
}

void CudaSession::Impl::allReduce(const std::vector<std::vector<const float *>> &in,
                                  const std::vector<std::vector<float *>> &out,
                                  const std::vector<int64_t> &counts) {
  const size_t n = devs.size();
  if (!loopback) {
    std::vector<cudaStream_t> streams;
    for (Device &d : devs)
      streams.push_back(d.stream);
    for (size_t i = 0; i < counts.size(); ++i) {
      std::vector<const float *> ins(n);
      std::vector<float *> outs(n);
      for (size_t d = 0; d < n; ++d)
        ins[d] = in[d][i], outs[d] = out[d][i];
      nccl->allReduce(ins, outs, counts[i], streams);
    }
    return;
  }
  // Loopback: device 0's stream waits for every peer, sums, and the peers wait for it.
  Device &d0 = devs[0];
  for (size_t d = 1; d < n; ++d) {
    TPC_CUDA_CHECK(cudaEventRecord(devs[d].ev, devs[d].stream));
    TPC_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, devs[d].ev, 0));
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    LoopbackArgs a;
    a.n = static_cast<int>(n);
    a.count = counts[i];
    for (size_t d = 0; d < n; ++d)
      a.in[d] = in[d][i], a.out[d] = out[d][i];
    launchLoopbackAllReduce(a, d0.stream);
  }
  if (n > 1) {
    TPC_CUDA_CHECK(cudaEventRecord(d0.ev, d0.stream));
    for (size_t d = 1; d < n; ++d)
      TPC_CUDA_CHECK(cudaStreamWaitEvent(devs[d].stream, d0.ev, 0));
  }
}

void CudaSession::Impl::collective(const std::vector<size_t> &at, int64_t t) {
  const size_t n = devs.size();
  for (Device &dev : devs)
    dev.xqOf = nullptr; // the collective writes
  const Step &s0 = plan.devices[0].steps[at[0]];
  std::vector<std::vector<const float *>> in(n);
  std::vector<std::vector<float *>> out(n);
  std::vector<int64_t> counts;
  std::vector<TensorRef> xs, ys;
  for (size_t d = 0; d < n; ++d) {
    const Step &s = plan.devices[d].steps[at[d]];
    xs.push_back(bind(d, s.inputs[0], t));
    ys.push_back(bind(d, s.outputs[0], t));
  }
  if (s0.op == OpKind::AllReduceRmsNorm) {
    // y = x (+ r on device 0, so the sum holds the residual once), summed in place, then each device
    // normalizes its copy of the sum.
    for (size_t d = 0; d < n; ++d) {
      const Step &s = plan.devices[d].steps[at[d]];
      cudaSetDevice(devs[d].gpu);
      if (s.ints[0] == 1 && d == 0) {
        const TensorRef r = bind(d, s.inputs[1], t);
        BinaryArgs a;
        a.op = 0;
        a.a = xs[d].f();
        a.b = r.f();
        a.y = ys[d].f();
        a.rank = 1;
        a.shape[0] = xs[d].numel();
        a.bStride[0] = 1;
        if (a.shape[0] > 0)
          launchBinary(a, devs[d].stream);
      } else if (xs[d].data != ys[d].data) {
        copy(devs[d], xs[d], ys[d]);
      }
      in[d].push_back(ys[d].f());
      out[d].push_back(ys[d].f());
      if (d == 0)
        counts.push_back(ys[d].numel());
    }
    allReduce(in, out, counts);
    for (size_t d = 0; d < n; ++d) {
      const Step &s = plan.devices[d].steps[at[d]];
      cudaSetDevice(devs[d].gpu);
      const TensorRef nrm = bind(d, s.outputs[1], t);
      RmsNormArgs a;
      a.x = ys[d].f();
      a.w = s.ints[1] == 1 ? bind(d, s.inputs.back(), t).f() : nullptr;
      a.y = nrm.f();
      a.rows = ys[d].rows();
      a.n = ys[d].inner();
      a.eps = s.floats[0];
      devs[d].xqOf = nullptr;
      const bool q = a.rows > 0 && a.n > 0 && quantizeOutput(d, at[d], nrm, t, a.xq, a.xs);
      if (a.rows > 0 && a.n > 0)
        launchRmsNorm(a, devs[d].stream);
      if (q)
        primeQuantized(devs[d], nrm);
    }
    return;
  }
  if (s0.op == OpKind::AllReduce) {
    for (size_t d = 0; d < n; ++d) {
      const Step &s = plan.devices[d].steps[at[d]];
      cudaSetDevice(devs[d].gpu);
      for (size_t i = 0; i < s.inputs.size(); ++i) {
        TensorRef x = bind(d, s.inputs[i], t), y = bind(d, s.outputs[i], t);
        in[d].push_back(loopback ? y.f() : x.f()); // loopback sums in place after the copy
        out[d].push_back(y.f());
        if (loopback)
          copy(devs[d], x, y);
        if (d == 0)
          counts.push_back(x.numel());
      }
    }
    allReduce(in, out, counts);
    return;
  }
  const int64_t axis = s0.ints[0];
  if (s0.op == OpKind::ReduceScatter) {
    // Sum the whole x into each device's stage, then keep this device's part.
    for (size_t d = 0; d < n; ++d) {
      in[d].push_back(xs[d].f());
      out[d].push_back(devs[d].stage);
    }
    counts.push_back(xs[0].numel());
    allReduce(in, out, counts);
    int64_t off = 0;
    for (size_t d = 0; d < n; ++d) {
      cudaSetDevice(devs[d].gpu);
      narrow(devs[d], devs[d].stage, ys[d].data, xs[d].shape, ys[d].shape[axis], axis, off, 4, false);
      off += ys[d].shape[axis];
    }
    return;
  }
  // AllGather: each device writes its part into a zeroed whole, then the wholes are summed. x goes
  // through the stage first, since a plan may place x inside y.
  int64_t off = 0;
  for (size_t d = 0; d < n; ++d) {
    Device &dev = devs[d];
    cudaSetDevice(dev.gpu);
    const uint64_t xb = xs[d].numel() * 4;
    if (xb)
      TPC_CUDA_CHECK(cudaMemcpyAsync(dev.stage, xs[d].data, xb, cudaMemcpyDeviceToDevice, dev.stream));
    TPC_CUDA_CHECK(cudaMemsetAsync(ys[d].data, 0, ys[d].numel() * 4, dev.stream));
    narrow(dev, dev.stage, ys[d].data, ys[d].shape, xs[d].shape[axis], axis, off, 4, true);
    off += xs[d].shape[axis];
    in[d].push_back(ys[d].f());
    out[d].push_back(ys[d].f());
  }
  counts.push_back(ys[0].numel());
  allReduce(in, out, counts);
}

void CudaSession::Impl::runSteps(int64_t t) {
  const size_t n = devs.size();
  std::vector<size_t> at(n, 0);
  for (Device &dev : devs)
    dev.xqOf = nullptr;
  for (;;) {
    for (size_t d = 0; d < n; ++d) {
      const std::vector<Step> &steps = plan.devices[d].steps;
      TPC_CUDA_CHECK(cudaSetDevice(devs[d].gpu));
      while (at[d] < steps.size() && !isCollective(steps[at[d]].op)) {
        auto t0 = std::chrono::steady_clock::now();
        size_t done = 1;
        if (devs[d].hostStep[at[d]])
          runHostStep(d, at[d], t);
        else
          done = runFused(d, at[d], t);
        if (profiling && d == 0) { // a fused pair counts under its first step
          TPC_CUDA_CHECK(cudaStreamSynchronize(devs[0].stream));
          prof[at[d]].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          ++prof[at[d]].calls;
        }
        at[d] += done;
      }
    }
    if (at[0] >= plan.devices[0].steps.size())
      return; // open() checked that every device has the same collectives, so all are done
    collective(at, t);
    for (size_t &a : at)
      ++a;
  }
}

/// A host-placed step (the CPU kernels, on host memory), or a copy between host and device memory.
void CudaSession::Impl::runHostStep(size_t d, size_t i, int64_t t) {
  const DevicePlan &dp = plan.devices[d];
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
    return;
  }
  if (dev.hostSync) {
    TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    dev.hostSync = false;
  }
  exec::runLocalStep(s, in, out, dev.kv, *hostThreads);
}

void CudaSession::Impl::runChunk(int64_t t) {
  const size_t n = devs.size();
  Device &d0 = devs[0];
  // Host steps run on this thread between launches: such a plan cannot be one graph.
  const bool useGraph = copts.graphs && loopback && t == 1 && !profiling && !hostThreads;
  if (!useGraph) {
    runSteps(t);
    return;
  }
  TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
  // The peers' token uploads were enqueued on their own streams: the graph (launched on stream 0) waits.
  for (size_t d = 1; d < n; ++d) {
    TPC_CUDA_CHECK(cudaEventRecord(devs[d].ev, devs[d].stream));
    TPC_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, devs[d].ev, 0));
  }
  if (!graph) {
    // Capture: fork the peers' streams from stream 0, run one decode step, join them back.
    cudaGraph_t g = nullptr;
    TPC_CUDA_CHECK(cudaStreamBeginCapture(d0.stream, cudaStreamCaptureModeThreadLocal));
    try {
      TPC_CUDA_CHECK(cudaEventRecord(d0.ev, d0.stream));
      for (size_t d = 1; d < n; ++d)
        TPC_CUDA_CHECK(cudaStreamWaitEvent(devs[d].stream, d0.ev, 0));
      runSteps(1);
      for (size_t d = 1; d < n; ++d) {
        TPC_CUDA_CHECK(cudaEventRecord(devs[d].ev, devs[d].stream));
        TPC_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, devs[d].ev, 0));
      }
    } catch (...) {
      cudaStreamEndCapture(d0.stream, &g);
      if (g)
        cudaGraphDestroy(g);
      throw;
    }
    TPC_CUDA_CHECK(cudaStreamEndCapture(d0.stream, &g));
    cudaError_t e = cudaGraphInstantiate(&graph, g, 0);
    cudaGraphDestroy(g);
    TPC_CUDA_CHECK(e);
  }
  TPC_CUDA_CHECK(cudaGraphLaunch(graph, d0.stream));
}

CudaSession::CudaSession() : impl_(std::make_unique<Impl>()) {}
CudaSession::~CudaSession() = default;

Expected<std::unique_ptr<CudaSession>> CudaSession::open(Plan plan, const SessionOptions &opts,
                                                         const CudaOptions &copts) {
  using E = Expected<std::unique_ptr<CudaSession>>;
  if (auto errs = validatePlan(plan); !errs.empty())
    return Error{"invalid plan: " + errs[0]};
  std::unique_ptr<CudaSession> s(new CudaSession());
  Impl &m = *s->impl_;
  m.plan = std::move(plan);
  m.copts = copts;
  const Plan &p = m.plan;
  const size_t n = p.devices.size();
  m.ctx = opts.ctxSize > 0 ? opts.ctxSize : p.model.defaultCtx;
  if (m.ctx > (int64_t(1) << 26))
    return Error{fmt::format("--ctx-size {} is too large", m.ctx)};

  // GPUs: logical device d on gpus[d % count].
  const int visible = cudaDeviceCount();
  if (visible == 0)
    return Error{"no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES); use --backend cpu"};
  std::vector<int> gpus = copts.gpus;
  if (gpus.empty())
    for (int g = 0; g < visible; ++g)
      gpus.push_back(g);
  for (int g : gpus)
    if (g < 0 || g >= visible)
      return Error{fmt::format("--gpus: GPU {} does not exist ({} visible)", g, visible)};
  std::set<int> used;
  m.devs.resize(n);
  for (size_t d = 0; d < n; ++d) {
    m.devs[d].gpu = gpus[d % gpus.size()];
    used.insert(m.devs[d].gpu);
  }
  m.loopback = used.size() == 1;
  if (!m.loopback && used.size() != n)
    return Error{
        fmt::format("the plan's {} devices would share {} GPUs unevenly; give --gpus either one GPU "
                    "(loopback collectives) or {} distinct GPUs (NCCL)",
                    n, used.size(), n)};
  if (m.loopback && n > size_t(kMaxLoopback))
    return Error{fmt::format("{} logical devices on one GPU; at most {} are supported", n, kMaxLoopback)};

  // KV descriptors first (checkStep reads them), then the plan checks, before touching GPU memory.
  for (size_t d = 0; d < n; ++d)
    for (const KvCache &c : p.devices[d].kv) {
      KvBuffers b;
      b.desc = c;
      b.ctx = m.ctx;
      m.devs[d].kv.push_back(b);
    }
  for (size_t d = 0; d < n; ++d)
    m.devs[d].ptr.assign(p.devices[d].tensors.size(), nullptr);
  for (int64_t t : {int64_t(1), p.model.maxBatch})
    if (std::string e = m.checkAll(t); !e.empty())
      return Error{"plan does not fit its ops: " + e};

  auto weights = openWeightSource(p, opts);
  if (!weights)
    return Error{weights.message()};
  const uint8_t *src = weights->data;

  try {
    // Sizes per logical device, then capacity per GPU (several logical devices may share one).
    struct Sizes {
      uint64_t weights = 0, acts = 0, kv = 0, scratch = 0, f16 = 0;
      uint64_t hostWeights = 0, hostActs = 0, hostKv = 0; ///< host placement (not counted against the GPU)
      ScratchPlan sp;
      std::vector<uint64_t> sliceOffset;
      std::vector<int64_t> f16Offset;
      uint64_t total() const { return weights + acts + kv + scratch; }
    };
    std::vector<Sizes> sizes(n);
    const uint64_t io = alignUp(p.model.maxBatch * 4) * 2 + alignUp(p.model.maxBatch * p.model.nVocab * 4);
    for (size_t d = 0; d < n; ++d) {
      const DevicePlan &dp = p.devices[d];
      Sizes &z = sizes[d];
      for (const WeightSlice &w : dp.weights) {
        uint64_t &arena = w.placement == Placement::Host ? z.hostWeights : z.weights;
        z.sliceOffset.push_back(arena);
        arena += alignUp(w.bytes);
      }
      z.acts = dp.activationBytes;
      z.hostActs = dp.hostActivationBytes; // the plan's host arena (v3 plans: as large as the device's)
      for (const KvCache &c : dp.kv)
        (c.placement == Placement::Host ? z.hostKv : z.kv) +=
            alignUp(m.ctx * c.nHeadKv * c.headDimK * dtypeBytes(c.dtype)) +
            alignUp(m.ctx * c.nHeadKv * c.headDimV * dtypeBytes(c.dtype));
      z.sp = m.scratchFor(d);
      // f16 copies of the matmul weights the cuBLAS path reads (decided per GPU below).
      z.f16Offset.assign(dp.weights.size(), -1);
      if (copts.f16Cache && p.model.maxBatch >= copts.cublasMinRows)
        for (const Step &st : dp.steps) {
          if (st.op != OpKind::Matmul || touchesHost(dp, st))
            continue;
          const TensorDesc &wd = dp.tensors[st.inputs[1]];
          if (wd.storage != Storage::Weight || z.f16Offset[wd.index] >= 0)
            continue;
          const WeightSlice &ws = dp.weights[wd.index];
          int64_t elems = 1;
          for (int64_t v : ws.shape)
            elems *= v;
          z.f16Offset[wd.index] = static_cast<int64_t>(z.f16);
          z.f16 += alignUp(uint64_t(elems) * 2);
        }
      z.scratch = alignUp(z.sp.wTile) + alignUp(z.sp.xHalf) + alignUp(z.sp.route) + alignUp(z.sp.stage) +
                  alignUp(z.sp.xqElems) + alignUp(z.sp.xqElems / 32 * kXQBlockBytes) + io;
      if (opts.maxDeviceBytes && z.total() > opts.maxDeviceBytes)
        return Error{
            fmt::format("device {} needs {} bytes (weights {}, activations {}, KV {} for --ctx-size {}, "
                        "scratch {}) but has {}; use more devices or a smaller --ctx-size",
                        d, z.total(), z.weights, z.acts, z.kv, m.ctx, z.scratch, opts.maxDeviceBytes)};
    }
    for (int g : used) {
      uint64_t need = 0;
      for (size_t d = 0; d < n; ++d)
        if (m.devs[d].gpu == g)
          need += sizes[d].total();
      size_t freeB = 0, totalB = 0;
      TPC_CUDA_CHECK(cudaSetDevice(g));
      TPC_CUDA_CHECK(cudaMemGetInfo(&freeB, &totalB));
      // The f16 weight cache only where everything fits with 1 GiB to spare; otherwise tiles.
      uint64_t cache = 0;
      for (size_t d = 0; d < n; ++d)
        if (m.devs[d].gpu == g)
          cache += sizes[d].f16;
      if (cache && need + cache + (uint64_t(1) << 30) > freeB)
        for (size_t d = 0; d < n; ++d)
          if (m.devs[d].gpu == g) {
            sizes[d].f16 = 0;
            sizes[d].f16Offset.assign(sizes[d].f16Offset.size(), -1);
          }
      if (need + (uint64_t(256) << 20) > freeB) // leave room for cuBLAS workspaces and the CUDA context
        return Error{
            fmt::format("GPU {} ({}) has {:.2f} GiB free but the plan's devices on it need {:.2f} GiB "
                        "for --ctx-size {}; use more GPUs or a smaller --ctx-size",
                        g, cudaDeviceName(g), freeB / double(1ull << 30), need / double(1ull << 30), m.ctx)};
    }

    // Allocate, resolve addresses, create streams and handles.
    for (size_t d = 0; d < n; ++d) {
      const DevicePlan &dp = p.devices[d];
      Device &dev = m.devs[d];
      const Sizes &z = sizes[d];
      TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
      TPC_CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
      TPC_CUDA_CHECK(cudaEventCreateWithFlags(&dev.ev, cudaEventDisableTiming));
      TPC_CUBLAS_CHECK(cublasCreate(&dev.blas));
      TPC_CUBLAS_CHECK(cublasSetStream(dev.blas, dev.stream));
      auto alloc = [&](GpuAlloc &a, uint64_t bytes, const char *what) {
        cudaError_t e = a.allocate(dev.gpu, bytes);
        if (e != cudaSuccess)
          throw CudaError(fmt::format("device {} (GPU {}): cannot allocate {} bytes of {}: {}", d, dev.gpu,
                                      bytes, what, cudaGetErrorString(e)));
      };
      alloc(dev.weights, z.weights, "weights");
      auto hostAlloc = [&](HostAlloc &a, uint64_t bytes, unsigned flags, const char *what) {
        if (bytes == 0)
          return;
        cudaError_t e = cudaHostAlloc(&a.p, bytes, flags);
        if (e != cudaSuccess)
          throw CudaError(fmt::format("device {}: cannot allocate {} bytes of pinned host memory for the host-"
                                      "placed {}: {}",
                                      d, bytes, what, cudaGetErrorString(e)));
        std::memset(a.p, 0, bytes);
      };
      hostAlloc(dev.hostActs, z.hostActs, cudaHostAllocPortable, "activations");
      hostAlloc(dev.hostKv, z.hostKv, cudaHostAllocPortable | cudaHostAllocMapped, "KV cache");
      if (z.hostWeights)
        dev.hostWeights.reset(new uint8_t[z.hostWeights]);
      alloc(dev.acts, z.acts, "activations");
      alloc(dev.kvMem, z.kv, "KV cache");
      alloc(dev.scratch, z.scratch, "scratch");
      if (z.f16)
        alloc(dev.f16, z.f16, "f16 weight cache");
      dev.f16Of.assign(dp.weights.size(), nullptr);
      for (size_t w = 0; w < dp.weights.size(); ++w)
        if (z.f16Offset[w] >= 0)
          dev.f16Of[w] = dev.f16.p + z.f16Offset[w];
      TPC_CUDA_CHECK(cudaMemsetAsync(dev.acts.p, 0, std::max<uint64_t>(z.acts, 1), dev.stream));
      TPC_CUDA_CHECK(cudaMemsetAsync(dev.kvMem.p, 0, std::max<uint64_t>(z.kv, 1), dev.stream));
      dev.sliceOffset = z.sliceOffset;
      uint64_t at = 0, hostAt = 0;
      uint8_t *hostKv = nullptr; // the device's address of the mapped host caches (the same under UVA)
      if (dev.hostKv.p) {
        void *mapped = nullptr;
        TPC_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, dev.hostKv.p, 0));
        if (mapped != dev.hostKv.p)
          throw CudaError("--no-kv-offload needs unified addressing (host and device pointers equal)");
        hostKv = static_cast<uint8_t *>(mapped);
      }
      for (KvBuffers &b : dev.kv) {
        const uint64_t eb = dtypeBytes(b.desc.dtype);
        const bool host = b.desc.placement == Placement::Host;
        uint8_t *base = host ? hostKv : dev.kvMem.p;
        uint64_t &off = host ? hostAt : at;
        b.k = base + off;
        off += alignUp(m.ctx * b.desc.nHeadKv * b.desc.headDimK * eb);
        b.v = base + off;
        off += alignUp(m.ctx * b.desc.nHeadKv * b.desc.headDimV * eb);
      }
      uint8_t *sc = dev.scratch.p;
      auto take = [&](uint64_t bytes) {
        uint8_t *r = sc;
        sc += alignUp(bytes);
        return r;
      };
      dev.wTile = z.sp.wTile ? take(z.sp.wTile) : nullptr;
      dev.tileElems = z.sp.tileElems;
      dev.xHalf = z.sp.xHalf ? take(z.sp.xHalf) : nullptr;
      dev.route = z.sp.route ? reinterpret_cast<int32_t *>(take(z.sp.route)) : nullptr;
      dev.stage = z.sp.stage ? reinterpret_cast<float *>(take(z.sp.stage)) : nullptr;
      dev.xqElems = z.sp.xqElems;
      dev.xq = reinterpret_cast<int8_t *>(take(z.sp.xqElems));
      dev.xs = reinterpret_cast<XQBlock *>(take(z.sp.xqElems / 32 * kXQBlockBytes));
      dev.tokens = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
      dev.positions = reinterpret_cast<int32_t *>(take(p.model.maxBatch * 4));
      dev.logits = reinterpret_cast<float *>(take(p.model.maxBatch * p.model.nVocab * 4));
      exec::StorageBases bases;
      bases.acts = dev.acts.p;
      bases.hostActs = static_cast<uint8_t *>(dev.hostActs.p);
      for (size_t w = 0; w < dp.weights.size(); ++w)
        bases.weights.push_back((dp.weights[w].placement == Placement::Host ? dev.hostWeights.get() : dev.weights.p) +
                                dev.sliceOffset[w]);
      bases.kv = &dev.kv;
      bases.tokens = dev.tokens;
      bases.positions = dev.positions;
      bases.logits = dev.logits;
      dev.ptr = exec::resolveTensors(dp, bases);
      dev.hostStep.assign(dp.steps.size(), 0);
      dev.hostNear.assign(dp.steps.size(), 0);
      for (size_t i = 0; i < dp.steps.size(); ++i)
        if ((dev.hostStep[i] = touchesHost(dp, dp.steps[i])))
          for (size_t j = i >= kFuseReach - 1 ? i - (kFuseReach - 1) : 0; j <= i; ++j)
            dev.hostNear[j] = 1;
      if (!m.hostThreads && std::count(dev.hostStep.begin(), dev.hostStep.end(), 1)) // --threads, else all
        m.hostThreads = std::make_unique<cpu::ThreadGroup>(
            opts.threads > 0 ? opts.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
    }
    m.logitsTensor = exec::logitsTensorOf(p.devices[0]);
    if (m.logitsTensor < 0)
      return Error{"device 0 has no OUTPUT_LOGITS tensor; recompile the plan"};

    // Upload the weights slice by slice through two pinned staging buffers (copy of one overlaps the
    // packing of the other).
    constexpr uint64_t kStage = uint64_t(64) << 20;
    HostAlloc stage[2];
    cudaEvent_t staged[2] = {nullptr, nullptr};
    TPC_CUDA_CHECK(cudaMallocHost(&stage[0].p, kStage));
    TPC_CUDA_CHECK(cudaMallocHost(&stage[1].p, kStage));
    uint64_t totalBytes = 0, doneBytes = 0;
    for (const DevicePlan &dp : p.devices)
      for (const WeightSlice &w : dp.weights)
        totalBytes += w.bytes;
    int lastPct = -1;
    auto progress = [&](bool end) {
      if (!copts.progress || totalBytes == 0)
        return;
      const int pct = static_cast<int>(doneBytes * 100 / totalBytes);
      if (pct == lastPct && !end)
        return;
      lastPct = pct;
      const int bar = pct / 4;
      fmt::print(stderr, "\rloading weights [{:<25}] {:3d}% {:.2f}/{:.2f} GiB", std::string(bar, '#'), pct,
                 doneBytes / double(1ull << 30), totalBytes / double(1ull << 30));
      if (end)
        fmt::print(stderr, "\n");
    };
    for (size_t d = 0; d < n; ++d) {
      Device &dev = m.devs[d];
      const DevicePlan &dp = p.devices[d];
      TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
      for (cudaEvent_t &e : staged) {
        if (e)
          cudaEventDestroy(e);
        e = nullptr;
        TPC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        TPC_CUDA_CHECK(cudaEventRecord(e, dev.stream));
      }
      int buf = 0;
      uint64_t fill = 0;
      uint8_t *dst = nullptr;
      auto flush = [&]() {
        if (fill == 0)
          return;
        TPC_CUDA_CHECK(cudaMemcpyAsync(dst, stage[buf].p, fill, cudaMemcpyHostToDevice, dev.stream));
        TPC_CUDA_CHECK(cudaEventRecord(staged[buf], dev.stream));
        dst += fill;
        doneBytes += fill;
        fill = 0;
        buf ^= 1;
        TPC_CUDA_CHECK(cudaEventSynchronize(staged[buf])); // the other buffer's copy is done
        progress(false);
      };
      for (size_t w = 0; w < dp.weights.size(); ++w) {
        flush();
        if (dp.weights[w].placement == Placement::Host) { // stays in host memory
          uint8_t *h = dev.hostWeights.get() + dev.sliceOffset[w];
          for (const WeightPiece &pc : dp.weights[w].pieces)
            for (uint64_t r = 0; r < pc.rows; ++r, h += pc.rowBytes)
              std::memcpy(h, src + pc.fileOffset + r * pc.rowStride, pc.rowBytes);
          doneBytes += dp.weights[w].bytes;
          progress(false);
          continue;
        }
        dst = dev.weights.p + dev.sliceOffset[w];
        for (const WeightPiece &pc : dp.weights[w].pieces)
          for (uint64_t r = 0; r < pc.rows; ++r) {
            const uint8_t *row = src + pc.fileOffset + r * pc.rowStride;
            uint64_t left = pc.rowBytes;
            while (left > 0) {
              const uint64_t take = std::min(left, kStage - fill);
              std::memcpy(static_cast<uint8_t *>(stage[buf].p) + fill, row, take);
              fill += take;
              row += take;
              left -= take;
              if (fill == kStage)
                flush();
            }
          }
      }
      flush();
      // The f16 cache, dequantized once from the uploaded slices.
      for (size_t w = 0; w < dp.weights.size(); ++w) {
        if (!dev.f16Of[w])
          continue;
        const WeightSlice &ws = dp.weights[w];
        const int64_t k = ws.shape.back();
        DequantArgs dq;
        dq.type = ws.type;
        dq.w = dev.weights.p + dev.sliceOffset[w];
        dq.rowBytes = ws.type == GGMLType::F32 ? k * 4 : *ggmlRowBytes(ws.type, static_cast<uint64_t>(k));
        dq.rows = k ? static_cast<int64_t>(ws.bytes / dq.rowBytes) : 0;
        dq.k = k;
        dq.out = dev.f16Of[w];
        launchDequantF16(dq, dev.stream);
      }
      TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    }
    for (cudaEvent_t e : staged)
      if (e)
        cudaEventDestroy(e);
    progress(true);

    // N > 1 on distinct GPUs: one NCCL communicator per GPU.
    if (!m.loopback) {
      std::vector<int> order;
      for (const Device &d : m.devs)
        order.push_back(d.gpu);
      auto comms = NcclComms::create(order);
      if (!comms)
        return Error{comms.message()};
      m.nccl = std::move(*comms);
    }
    const uint64_t hostBytes = p.model.maxBatch * 8 + p.model.maxBatch * p.model.nVocab * 4;
    TPC_CUDA_CHECK(cudaMallocHost(&m.hostIo.p, hostBytes));
  } catch (const CudaError &e) {
    return Error{e.what()};
  }
  m.prof.resize(p.devices[0].steps.size());
  for (size_t i = 0; i < m.prof.size(); ++i)
    m.prof[i].name = p.devices[0].steps[i].name, m.prof[i].op = p.devices[0].steps[i].op;
  return E(std::move(s));
}

Expected<std::vector<float>> CudaSession::evaluate(const std::vector<int32_t> &tokens,
                                                   const std::vector<int32_t> &positions) {
  using E = Expected<std::vector<float>>;
  Impl &m = *impl_;
  const Plan &p = m.plan;
  if (!m.failure.empty())
    return Error{"execution failed earlier: " + m.failure + "; reopen the plan"};
  if (std::string bad = checkEvaluateArgs(p, m.ctx, tokens, positions); !bad.empty())
    return Error{bad};
  const int64_t vocab = p.model.nVocab, total = static_cast<int64_t>(tokens.size());
  std::vector<float> logits(static_cast<size_t>(total * vocab));
  int32_t *hTok = static_cast<int32_t *>(m.hostIo.p), *hPos = hTok + p.model.maxBatch;
  float *hLogits = reinterpret_cast<float *>(hPos + p.model.maxBatch);
  try {
    for (int64_t at = 0; at < total; at += p.model.maxBatch) {
      const int64_t t = std::min(p.model.maxBatch, total - at);
      std::copy(tokens.begin() + at, tokens.begin() + at + t, hTok);
      std::copy(positions.begin() + at, positions.begin() + at + t, hPos);
      for (Device &dev : m.devs) {
        TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
        TPC_CUDA_CHECK(cudaMemcpyAsync(dev.tokens, hTok, t * 4, cudaMemcpyHostToDevice, dev.stream));
        TPC_CUDA_CHECK(cudaMemcpyAsync(dev.positions, hPos, t * 4, cudaMemcpyHostToDevice, dev.stream));
      }
      m.runChunk(t);
      Device &d0 = m.devs[0];
      TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
      TPC_CUDA_CHECK(cudaMemcpyAsync(hLogits, m.devs[0].ptr[m.logitsTensor], t * vocab * 4,
                                     cudaMemcpyDeviceToHost, d0.stream));
      for (Device &dev : m.devs) {
        TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
        TPC_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
      }
      std::memcpy(logits.data() + at * vocab, hLogits, t * vocab * 4);
    }
  } catch (const CudaError &e) {
    m.failure = e.what();
    return Error{"execution failed: " + m.failure + "; reopen the plan"};
  }
  return logits;
}

const Plan &CudaSession::plan() const { return impl_->plan; }
int64_t CudaSession::ctxSize() const { return impl_->ctx; }
int64_t CudaSession::nVocab() const { return impl_->plan.model.nVocab; }
std::vector<uint64_t> CudaSession::deviceBytes() const {
  std::vector<uint64_t> out;
  for (const Device &d : impl_->devs)
    out.push_back(d.weights.size + d.acts.size + d.kvMem.size + d.scratch.size + d.f16.size);
  return out;
}
std::vector<int> CudaSession::gpuOf() const {
  std::vector<int> out;
  for (const Device &d : impl_->devs)
    out.push_back(d.gpu);
  return out;
}
bool CudaSession::usesGraphs() const { return impl_->copts.graphs && impl_->loopback; }

double CudaSession::copyBandwidth(int gpu) const {
  if (cudaSetDevice(gpu) != cudaSuccess)
    return 0;
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess)
    return 0;
  // Two buffers of a quarter of what is free at most: large enough to stream past the 50 MiB L2.
  const size_t bytes = std::min<size_t>(size_t(512) << 20, freeBytes / 4) / 256 * 256;
  if (bytes < (size_t(64) << 20))
    return 0;
  void *a = nullptr, *b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      cudaMemset(a, 1, bytes) == cudaSuccess) {
    for (int r = 0; r < 6; ++r) { // the first copy warms up
      float ms = 0;
      if (cudaEventRecord(start) != cudaSuccess || cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
          cudaEventRecord(stop) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
        break;
      if (r > 0 && ms > 0)
        best = std::max(best, 2.0 * double(bytes) / (ms * 1e-3));
    }
  }
  cudaGetLastError(); // a failed allocation above must not surface as a later step's error
  if (start)
    cudaEventDestroy(start);
  if (stop)
    cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return best;
}

std::vector<float> CudaSession::tensorData(size_t device, int32_t id, int64_t tokens) const {
  const Impl &m = *impl_;
  if (device >= m.devs.size() || id < 0 || static_cast<size_t>(id) >= m.devs[device].ptr.size() ||
      m.plan.devices[device].tensors[id].storage == Storage::Weight)
    return {};
  TensorRef r = m.bind(device, id, tokens);
  const size_t n = static_cast<size_t>(r.numel()), es = dtypeBytes(r.dtype);
  std::vector<uint8_t> raw(n * es);
  cudaSetDevice(m.devs[device].gpu);
  if (n && cudaMemcpy(raw.data(), r.data, raw.size(), cudaMemcpyDefault) != cudaSuccess) // host or device
    return {};
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (r.dtype == DType::F32)
      std::memcpy(&out[i], &raw[i * 4], 4);
    else if (r.dtype == DType::I32) {
      int32_t v;
      std::memcpy(&v, &raw[i * 4], 4);
      out[i] = static_cast<float>(v);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[i * 2], 2);
      out[i] = exec::halfToFloat(h);
    }
  }
  return out;
}

void CudaSession::setProfiling(bool on) { impl_->profiling = on; }
std::vector<StepProfile> CudaSession::profile() const { return impl_->prof; }

} // namespace tpc::rt::cuda
