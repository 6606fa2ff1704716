//===- Collectives.cpp - all-reduce and the collective steps of the CUDA session -===//
//
// Logical devices on distinct GPUs use NCCL (Nccl.h: one communicator per GPU, calls grouped and enqueued
// on each device's stream); several logical devices on one GPU use the loopback all-reduce kernel
// (Collective.cuh: rank-order sum, like the CPU), launched on device 0's stream and ordered against the
// peers' streams by events, never by a host sync. Every collective step is built on the all-reduce:
// AllGather sums zero-padded wholes, ReduceScatter keeps a narrow of the summed whole (both exact, the
// padding adds zeros), and AllReduceRmsNorm adds the residual on device 0 before the sum and normalizes
// each device's copy after it.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/Collective.cuh"
#include "runtime/cuda/Elementwise.cuh"

namespace tpc::rt::cuda {

using exec::TensorRef;

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
        a.op = BinaryOp::Add;
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

} // namespace tpc::rt::cuda
