//===- Graphs.cpp - CUDA graph capture and replay of one-token calls -------===//
//
// A one-token call is captured once (the session's other devices' streams forked from its first device's
// and joined back) and replayed on every later one-token call, when every device of the session sits on
// one GPU (the loopback collective is an ordinary kernel inside the graph) or the session is one rank of a
// job on NCCL (its calls only enqueue). Replays stay valid as the context grows because the kernels read
// positions from device memory. Not captured: calls of several tokens, in-process NCCL sessions, ranks on
// the host-staged MPI communicator (its calls block on the host), profiling runs (they synchronise after
// each step) and plans with host steps (host work between launches); those run the step loop directly. A
// failure while capturing ends the capture and leaves no graph.
//===----------------------------------------------------------------------===//
#include "runtime/cuda/SessionImpl.h"

#include "runtime/cuda/RankCommunicators.h"

namespace tpc::rt::cuda {

Expected<void> CudaSession::launchChunk(int64_t t) {
  Device &d0 = devs[devices().front()];
  const std::vector<int> peers(devices().begin() + 1, devices().end());
  // Host steps run on this thread between launches: such a plan cannot be one graph. A communicator of
  // SessionOptions (a rank of a job) is captured when it is stream-ordered all through (NCCL), not when
  // it blocks on the host (host-staged MPI).
  const bool capturable = ownComm ? loopback : rankCommunicatorCapturable(*communicator);
  const bool useGraph = copts.graphs && capturable && t == 1 && !profiling() && !hostRunner;
  if (!useGraph)
    return runSteps(t);
  TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
  // The peers' token uploads were enqueued on their own streams: the graph (launched on stream 0) waits.
  for (int d : peers) {
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
      for (int d : peers)
        TPC_CUDA_CHECK(cudaStreamWaitEvent(devs[d].stream, d0.ev, 0));
      ran = runSteps(1);
      for (size_t i = 0; ran && i < peers.size(); ++i) {
        const int d = peers[i];
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
