//===- SessionImpl.h - the CUDA session's state, shared by its files -*- C++ -*-===//
//
// Internal to runtime/cuda: the state behind CudaSession (CudaSession::Impl) and the per-logical-device
// record it keeps, with the memory RAII types they own. The session's code is split by concern, each file
// implementing its part of Impl:
//   Session.cpp      open (GPU mapping, plan checks, the order of the setup phases), evaluate, accessors
//   Memory.cpp       sizes, capacity, arenas and scratch, weight upload and the f16 weight cache
//   Dispatch.cpp     the step loop, the per-step op switch (the op entries), host steps, data movement
//   Fusion.cpp       run-time fusion and the quantized-x cache of the integer decode GEMV
//   Collectives.cpp  all-reduce (loopback kernel or NCCL) and the collective steps built on it
//   Graphs.cpp       capture and replay of one-token calls as a CUDA graph
//   Bandwidth.cpp    the copy-bandwidth probe (needs nothing of Impl)
// Nothing outside runtime/cuda includes this header; the public surface is CudaSession.h.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_SESSIONIMPL_H
#define TPC_RUNTIME_CUDA_SESSIONIMPL_H

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/CudaSession.h"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/cuda/Nccl.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#define TPC_CUBLAS_CHECK(expr)                                                                               \
  do {                                                                                                       \
    cublasStatus_t st_ = (expr);                                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                        \
      throw ::tpc::rt::cuda::CudaError(std::string(#expr) + ": " + cublasGetStatusString(st_));              \
  } while (0)

namespace tpc::rt::cuda {

/// Every arena and scratch part starts 256-byte aligned (the K-quant kernels use 16-byte loads).
constexpr uint64_t kAlign = 256;
/// mul_mat_id with at most this many (token, slot) pairs (decode) runs one block row per pair.
constexpr int64_t kPairGridMax = 16;
/// Steps a fused group may span from its first step (the quantized-output lookahead is the longest).
constexpr size_t kFuseReach = 9;

inline uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

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

/// What one logical device needs, computed before anything is allocated (Memory.cpp).
struct DeviceSizes {
  uint64_t weights = 0, acts = 0, kv = 0, scratch = 0, f16 = 0;
  uint64_t hostWeights = 0, hostActs = 0, hostKv = 0; ///< host placement (not counted against the GPU)
  ScratchPlan sp;
  std::vector<uint64_t> sliceOffset; ///< per weight slice, in its (device or host) weight arena
  std::vector<int64_t> f16Offset;    ///< per weight slice, in the f16 cache (-1: none)
  uint64_t total() const { return weights + acts + kv + scratch; }
};

/// One logical device: its GPU, stream, arenas and the addresses of the plan's tensors.
struct Device {
  int gpu = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t ev = nullptr;
  GpuAlloc weights, acts, kvMem, scratch, f16;
  std::vector<uint64_t> sliceOffset; ///< where each weight slice lives in `weights` (256-aligned)
  std::vector<void *> f16Of;         ///< the cached f16 copy of each weight slice (null: none)
  std::vector<exec::KvBuffers> kv;
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
  // Host placement (see Dispatch.cpp).
  HostAlloc hostActs, hostKv; ///< pinned; hostKv also mapped into the device's address space
  std::unique_ptr<uint8_t[]> hostWeights;
  std::vector<uint8_t> hostStep; ///< per step: touchesHost (runs on the host or copies across)
  std::vector<uint8_t> hostNear; ///< per step: a host-side step within the fusion lookahead
  bool hostSync = false;         ///< the stream has copies touching host memory since the last sync
};

/// True for a step that runs on the host or copies from or to host memory.
inline bool touchesHost(const DevicePlan &dp, const Step &s) {
  return s.placement == Placement::Host ||
         (s.op == OpKind::Copy && !s.inputs.empty() && tensorPlacement(dp, s.inputs[0]) == Placement::Host);
}

/// The ggml type of a bound weight operand (f32 for an activation used as one).
inline GGMLType typeOf(const exec::TensorRef &w) { return w.isWeight ? w.wtype : GGMLType::F32; }
/// Bytes of one row of a bound weight operand.
inline uint64_t rowBytesOf(const exec::TensorRef &w) {
  return w.isWeight ? *ggmlRowBytes(w.wtype, static_cast<uint64_t>(w.inner())) : w.inner() * 4;
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
  std::unique_ptr<cpu::ThreadGroup> hostThreads; ///< for host-placed steps (null: the plan has none)

  ~Impl();

  exec::TensorRef bind(size_t d, int32_t id, int64_t t) const {
    return exec::bindTensor(plan.devices[d], devs[d].ptr, id, t);
  }
  void bindStep(size_t d, const Step &s, int64_t t, std::vector<exec::TensorRef> &in,
                std::vector<exec::TensorRef> &out) const {
    exec::bindOperands(plan.devices[d], devs[d].ptr, s, t, in, out);
  }

  // Session.cpp
  std::string checkAll(int64_t t) const;
  void markHostSteps(size_t d, const SessionOptions &opts);

  // Memory.cpp (the CudaError-throwing ones run inside open's try block)
  ScratchPlan scratchFor(size_t d) const;
  std::string sizeDevices(const SessionOptions &opts, std::vector<DeviceSizes> &sizes) const;
  std::string fitGpus(const std::set<int> &used, std::vector<DeviceSizes> &sizes) const;
  void allocateDevice(size_t d, const DeviceSizes &z);
  void uploadWeights(const uint8_t *src);

  // Dispatch.cpp
  void runSteps(int64_t t);
  void runStep(size_t d, size_t i, int64_t t);
  void runHostStep(size_t d, size_t i, int64_t t);
  void matmul(Device &dev, const exec::TensorRef &x, const exec::TensorRef &w, const exec::TensorRef &y,
              const void *wF16);
  void copy(Device &dev, const exec::TensorRef &x, const exec::TensorRef &y);
  void narrow(Device &dev, const void *x, void *y, const std::vector<int64_t> &xShape, int64_t ySize,
              int64_t axis, int64_t offset, size_t es, bool insert);

  // Fusion.cpp
  size_t runFused(size_t d, size_t i, int64_t t);
  size_t groupedMatmul(size_t d, size_t i, int64_t t);
  size_t routeChain(size_t d, size_t i, int64_t t);
  size_t normRope(size_t d, size_t i, int64_t t);
  bool quantizeOutput(size_t d, size_t i, const exec::TensorRef &y, int64_t t, int8_t *&xq, XQBlock *&xs);
  void primeQuantized(Device &dev, const exec::TensorRef &y);
  void forgetIfWritten(Device &dev, const std::vector<exec::TensorRef> &outs);
  void quantizedX(Device &dev, GemvArgs &a, int64_t rows);

  // Collectives.cpp
  void allReduce(const std::vector<std::vector<const float *>> &in,
                 const std::vector<std::vector<float *>> &out, const std::vector<int64_t> &counts);
  void collective(const std::vector<size_t> &at, int64_t t);

  // Graphs.cpp
  void runChunk(int64_t t);
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_SESSIONIMPL_H
