//===- Graphs.cpp - CUDA graph capture and replay of one-token calls -------===//
//
// A one-token call is captured once (all logical devices' streams forked from device 0's and joined back)
// and replayed on every later one-token call, when every logical device sits on one GPU (the loopback
// collective is an ordinary kernel inside the graph). Replays stay valid as the context grows because
// the kernels read positions from device memory. Not captured: calls of several tokens, NCCL sessions
// and sessions on a communicator of SessionOptions, profiling runs (they synchronise after each step) and
// plans with host steps (host work between launches); those run the step loop directly. A failure while
// capturing ends the capture and leaves no graph.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

namespace tpc::rt::cuda {

Expected<void> CudaSession::launchChunk(int64_t t) {
  const size_t n = devs.size();
  Device &d0 = devs[0];
  // Host steps run on this thread between launches: such a plan cannot be one graph.
  const bool useGraph = copts.graphs && loopback && ownComm && t == 1 && !profiling() && !hostRunner;
  if (!useGraph)
    return runSteps(t);
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
    Expected<void> ran;
    try {
      TPC_CUDA_CHECK(cudaEventRecord(d0.ev, d0.stream));
      for (size_t d = 1; d < n; ++d)
        TPC_CUDA_CHECK(cudaStreamWaitEvent(devs[d].stream, d0.ev, 0));
      ran = runSteps(1);
      for (size_t d = 1; ran && d < n; ++d) {
        TPC_CUDA_CHECK(cudaEventRecord(devs[d].ev, devs[d].stream));
        TPC_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, devs[d].ev, 0));
      }
    } catch (...) {
      cudaStreamEndCapture(d0.stream, &g);
      if (g)
        cudaGraphDestroy(g);
      throw;
    }
    if (!ran) {
      cudaStreamEndCapture(d0.stream, &g);
      if (g)
        cudaGraphDestroy(g);
      return ran;
    }
    TPC_CUDA_CHECK(cudaStreamEndCapture(d0.stream, &g));
    cudaError_t e = cudaGraphInstantiate(&graph, g, 0);
    cudaGraphDestroy(g);
    TPC_CUDA_CHECK(e);
  }
  TPC_CUDA_CHECK(cudaGraphLaunch(graph, d0.stream));
  return {};
}

} // namespace tpc::rt::cuda
