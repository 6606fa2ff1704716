//===- SessionImpl.h - the CUDA session's state, shared by its files -*- C++ -*-===//
//
// Internal to runtime/cuda: CudaSession, the rt::Session of the CUDA backend (opened by openCudaSession,
// CudaSession.h, which CudaBackend calls), and the per-logical-device record it keeps. The session's code
// is split by concern, each file implementing its part of the class:
//   Session.cpp      open (exec::prepareOpen, GPU mapping, the GPU-only checks, the order of the setup
//                    phases), runChunk (uploads, the chunk, the logits copy-back), the accessors
//   Memory.cpp       sizes, capacity, arenas and scratch, weight upload and the f16 weight cache
//   Dispatch.cpp     the step loop, the per-step op switch (the op entries), host steps, data movement
//   Fusion.cpp       run-time fusion and the quantized-x cache of the integer decode GEMV
//   Collectives.cpp  the collective steps through exec::CollectiveRunner: the kernels adapter
//   Graphs.cpp       capture and replay of decode-sized calls (one graph per shape)
//   Bandwidth.cpp    the copy-bandwidth probe (needs nothing of the session's state)
// The communicators (loopback kernel, NCCL) are Communicators.h. Nothing outside runtime/cuda includes
// this header.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_SESSIONIMPL_H
#define TPC_RUNTIME_CUDA_SESSIONIMPL_H

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/CudaSession.h"
#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/Matmul.cuh"
#include "runtime/exec/Binding.h"
#include "runtime/exec/Collectives.h"
#include "runtime/exec/HostStepRunner.h"
#include "runtime/exec/Setup.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
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

/// Steps a fused group may span from its first step (the quantized-output lookahead is the longest).
constexpr size_t kFuseReach = 9;

/// Sizes of one device's scratch parts (bytes), from its steps at max_batch.
struct ScratchPlan {
  uint64_t wTile = 0, xHalf = 0, route = 0, stage = 0;
  uint64_t hostStage = 0; ///< a host-staged rank communicator's pinned buffer: the largest collective's in + out
  int64_t tileElems = 0; ///< elements of the f16 weight tile
  int64_t xqElems = 0;   ///< activation elements the integer decode GEMV may quantize at once
};

/// What one logical device needs, computed before anything is allocated (Memory.cpp).
struct DeviceSizes {
  uint64_t weights = 0, acts = 0, kv = 0, scratch = 0, f16 = 0;
  uint64_t stage = 0; ///< the communicator's staging buffer for this device (ScratchPlan::stage)
  uint64_t hostWeights = 0, hostActs = 0, hostKv = 0; ///< host placement (not counted against the GPU)
  ScratchPlan sp;
  std::vector<uint64_t> sliceOffset; ///< per weight slice, in its (device or host) weight arena
  std::vector<int64_t> f16Offset;    ///< per weight slice, in the f16 cache (-1: none)
  uint64_t total() const { return weights + acts + kv + scratch + stage; }
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
  /// kv as host steps see it (--no-kv-offload attention on the CPU kernels): the same caches (mapped host
  /// memory), with the call's sequence ids in host memory.
  std::vector<exec::KvBuffers> kvHost;
  std::vector<void *> ptr;
  int32_t *tokens = nullptr, *positions = nullptr, *seqs = nullptr, *rows = nullptr;
  float *logits = nullptr;
  void *wTile = nullptr, *xHalf = nullptr;
  uint64_t xHalfBytes = 0;
  int32_t *route = nullptr;
  int64_t tileElems = 0;
  uint64_t stageBytes = 0; ///< the session's own communicator's staging buffer on this device
  // x quantized for the integer decode GEMV (launchQuantizeX), and which x it holds: the matmuls that
  // follow on the same x (Q, K, V; gate, up) reuse it. Any other step forgets it (it may write x).
  int8_t *xq = nullptr;
  XQBlock *xs = nullptr;
  int64_t xqElems = 0;
  const float *xqOf = nullptr;
  int64_t xqHeld = 0; ///< elements of xqOf (whole 32-blocks in row-major order: any row length reads them)
  // The expert grouping in `route` (offsets, list, tile table) and the ids it was made from: the gate, up
  // and down mul_mat_id of a layer read the same ids and reuse it; forgotten like xqOf.
  const int32_t *routeOf = nullptr;
  int64_t routeCount = 0, routeExperts = 0, routeFirst = 0;
  bool routeTiles = false;
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

/// A plan loaded on GPUs: the CUDA backend's Session (see CudaSession.h for what it does).
class CudaSession final : public Session {
public:
  CudaSession(Plan plan, int64_t ctx, int32_t sequences, std::vector<int> devices, const CudaOptions &copts);
  ~CudaSession() override;

  /// Everything open does after exec::prepareOpen: the GPU-only checks, memory, weights, the
  /// communicator (Session.cpp). The error is one line.
  Expected<void> init(const exec::OpenPlan &o, const SessionOptions &opts, const Backend &hostCpu,
                      const std::vector<int> &gpuOfDevice);

  const char *backendName() const override { return "CUDA"; }
  int threadsPerDevice() const override { return 0; }
  std::vector<uint64_t> deviceBytes() const override;
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const override;
  std::vector<int> memoryOf() const override;
  /// Bandwidth.cpp: the best of 5 device-to-device copies of up to 512 MiB on GPU `gpu`, timed with
  /// events; 0 when it cannot be measured (no memory to spare, a CUDA error).
  double copyBandwidth(int gpu) const override;
  /// ReadProbe.cu: a streaming read kernel over up to 1 GiB on GPU `gpu`; 0 when it cannot be measured.
  double readBandwidth(int gpu) const override;
  std::string memoryName(int gpu) const override;
  int hostMemory() const override { return -1; } // host memory is not measured: host reads apart

protected:
  Expected<void> runChunk(const Chunk &c, float *logits) override;

private:
  class Kernels; // the exec::CollectiveKernels of this session (Collectives.cpp)

  /// The most output rows a call of t tokens has (what the sizes at open are computed for).
  int64_t maxRowsAt(int64_t t) const {
    const int64_t m = plan().model.maxOutputRows;
    return m > 0 ? std::min(t, m) : t;
  }
  // Operands of the chunk being run: t tokens (the callers pass it) and rows_ output rows.
  exec::TensorRef bind(size_t d, int32_t id, int64_t t) const {
    return exec::bindTensor(plan().devices[d], devs[d].ptr, id, t, rows_);
  }
  void bindStep(size_t d, const Step &s, int64_t t, std::vector<exec::TensorRef> &in,
                std::vector<exec::TensorRef> &out) const {
    exec::bindOperands(plan().devices[d], devs[d].ptr, s, t, rows_, in, out);
  }
  int64_t rows_ = 1; ///< output rows of the chunk being run (part of a captured graph's shape)

  // Session.cpp
  void markHostSteps(size_t d);
  Expected<void> makeCommunicator(const SessionOptions &opts, const std::vector<DeviceSizes> &sizes);

  // Memory.cpp (the CudaError-throwing ones run inside init's try block)
  ScratchPlan scratchFor(size_t d) const;
  std::string sizeDevices(const SessionOptions &opts, std::vector<DeviceSizes> &sizes) const;
  std::string fitGpus(const std::set<int> &used, std::vector<DeviceSizes> &sizes) const;
  void allocateDevice(size_t d, const DeviceSizes &z);
  void uploadWeights(const exec::WeightSource &from);

  // Dispatch.cpp
  Expected<void> runSteps(int64_t t);
  void runStep(size_t d, size_t i, int64_t t);
  Expected<void> runHostStep(size_t d, size_t i, int64_t t);
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
  /// Runs the collective every device is at (step at[d] of device d) for all devices in one call.
  Expected<void> collective(const std::vector<size_t> &at, int64_t t);

  // Graphs.cpp
  /// Runs a chunk of t tokens whose inputs are uploaded: a replayed CUDA graph or the step loop.
  Expected<void> launchChunk(int64_t t);

  CudaOptions copts;
  std::vector<Device> devs; ///< by plan device; only those of devices() are set up
  bool loopback = true;     ///< every device of the session on one GPU
  int32_t logitsTensor = -1;
  HostAlloc hostIo; ///< tokens, positions, logits rows
  /// Captured calls by (tokens, logits rows) (Graphs.cpp).
  std::map<std::pair<int64_t, int64_t>, cudaGraphExec_t> graphs;
  static constexpr size_t kMaxGraphs = 64; ///< shapes captured at most (later ones run uncaptured)
  bool ownComm = false; ///< the communicator is the session's own (loopback or NCCL), not SessionOptions'
  std::unique_ptr<exec::HostStepRunner> hostRunner; ///< host-placed steps (null: the plan has none)
  // Declared in this order so that the runner goes before what it refers to.
  std::shared_ptr<comm::Communicator> communicator;
  std::unique_ptr<Kernels> kernels;
  std::unique_ptr<exec::CollectiveRunner> collectives;
};

/// The kernels exec::CollectiveRunner composes the collective steps from (copy, add, rms_norm), on each
/// device's GPU and stream. The rms_norm of AllReduceRmsNorm also writes the quantized x when an integer
/// decode GEMV reads its output next, which needs the step each device is at: at() is set per collective.
class CudaSession::Kernels final : public exec::CollectiveKernels {
public:
  explicit Kernels(CudaSession &s) : s_(s) {}
  /// The collective step of each device and the token count of the call about to run.
  void at(const std::vector<size_t> &steps, int64_t t) {
    steps_ = steps;
    t_ = t;
  }
  void copy(int rank, const exec::TensorRef &x, const exec::TensorRef &y) override;
  void add(int rank, const exec::TensorRef &a, const exec::TensorRef &b, const exec::TensorRef &y) override;
  void rmsNorm(int rank, const exec::TensorRef &x, const exec::TensorRef *w, const exec::TensorRef &y,
               float eps) override;

private:
  CudaSession &s_;
  std::vector<size_t> steps_;
  int64_t t_ = 0;
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_SESSIONIMPL_H
