//===- Collectives.cpp - the collective steps of the CUDA session ----------===//
//
// Every collective step runs through exec::CollectiveRunner, which composes it (AllReduce, the
// AllReduceRmsNorm layer boundary, ReduceScatter, AllGather) from the session's stream-ordered
// communicator (Communicators.h: loopback kernel or NCCL) and the three kernels of CudaSession::Kernels,
// enqueued on each device's stream. One call covers every device, as the communicators need. The quantized
// x a device holds is forgotten first (a collective writes), and the rms_norm of AllReduceRmsNorm writes
// it again where an integer decode GEMV reads the norm next (Fusion.cpp's quantizeOutput).
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Elementwise.cuh"

namespace tpc::rt::cuda {

using exec::TensorRef;

Expected<void> CudaSession::collective(const std::vector<size_t> &at, int64_t t) {
  std::vector<std::vector<TensorRef>> in(devs.size()), out(devs.size());
  std::vector<exec::CollectiveCall> calls; // one entry per device of the session (a rank: its own)
  for (int d : devices()) {
    devs[d].xqOf = nullptr;
    devs[d].routeOf = nullptr;
    bindStep(d, plan().devices[d].steps[at[d]], t, in[d], out[d]);
    calls.push_back({static_cast<int>(d), at[d], &in[d], &out[d], devs[d].stream});
  }
  kernels->at(at, t);
  return collectives->run(calls, t, rows_);
}

void CudaSession::Kernels::copy(int rank, const TensorRef &x, const TensorRef &y) {
  Device &dev = s_.devs[rank];
  TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
  s_.copy(dev, x, y);
}

void CudaSession::Kernels::add(int rank, const TensorRef &a, const TensorRef &b, const TensorRef &y) {
  if (y.numel() == 0)
    return;
  Device &dev = s_.devs[rank];
  TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
  BinaryArgs k; // equal shapes: one flat row
  k.op = BinaryOp::Add;
  k.a = a.f();
  k.b = b.f();
  k.y = y.f();
  k.rank = 1;
  k.shape[0] = y.numel();
  k.bStride[0] = 1;
  launchBinary(k, dev.stream);
}

void CudaSession::Kernels::rmsNorm(int rank, const TensorRef &x, const TensorRef *w, const TensorRef &y,
                                   float eps) {
  Device &dev = s_.devs[rank];
  RmsNormArgs a;
  a.x = x.f();
  a.w = w ? w->f() : nullptr;
  a.y = y.f();
  a.rows = x.rows();
  a.n = x.inner();
  a.eps = eps;
  if (a.rows == 0 || a.n == 0)
    return;
  TPC_CUDA_CHECK(cudaSetDevice(dev.gpu));
  const bool q = s_.quantizeOutput(rank, steps_[rank], y, t_, a.xq, a.xs);
  launchRmsNorm(a, dev.stream);
  if (q)
    s_.primeQuantized(dev, y);
}

} // namespace tpc::rt::cuda
