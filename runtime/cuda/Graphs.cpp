//===- Graphs.cpp - CUDA graph capture and replay of decode-sized calls ------===//
//
// A call of up to kGemvBatchMax (8) tokens is captured once per shape (tokens, logits rows) and replayed on
// every later call of that shape: one-token decode, and the batched decode steps of several sequences
// (`tpc serve -np P`, `--parallel`), whose launches would otherwise cost as much as their work. Capture
// forks the session's other devices' streams from its first device's and joins them back; it is done when
// every device of the session sits on one GPU (the loopback collective is an ordinary kernel inside the
// graph) or the session is one rank of a job on NCCL (its calls only enqueue). Replays stay valid as the
// context grows and for any routing because the kernels read tokens, positions, sequence ids, logits rows
// and expert choices from device memory, and a shape's host-side decisions (which kernel, which fusion,
// scratch addresses) depend on the shape alone. Not captured: larger calls (prefill), in-process NCCL
// sessions, ranks on the host-staged MPI communicator (its calls block on the host), profiling runs (they
// synchronise after each step) and plans with host steps (host work between launches); those run the step
// loop directly, as do shapes past the first kMaxGraphs. A failure while capturing ends the capture and
// leaves no graph.
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
  const std::pair<int64_t, int64_t> shape{t, rows_};
  auto it = graphs.find(shape);
  // Up to kGemvBatchMax tokens and below cuBLAS's rows: no library call that may allocate inside a capture.
  const bool useGraph = copts.graphs && capturable && t <= kGemvBatchMax && t < copts.cublasMinRows &&
                        !profiling() && !hostRunner && (it != graphs.end() || graphs.size() < kMaxGraphs);
  if (!useGraph)
    return runSteps(t);
  TPC_CUDA_CHECK(cudaSetDevice(d0.gpu));
  // The peers' token uploads were enqueued on their own streams: the graph (launched on stream 0) waits.
  for (int d : peers) {
    TPC_CUDA_CHECK(cudaEventRecord(devs[d].ev, devs[d].stream));
    TPC_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, devs[d].ev, 0));
  }
  if (it == graphs.end()) {
    // Capture: fork the peers' streams from stream 0, run the call's steps, join them back.
    cudaGraph_t g = nullptr;
    TPC_CUDA_CHECK(cudaStreamBeginCapture(d0.stream, cudaStreamCaptureModeThreadLocal));
    Expected<void> ran;
    try {
      TPC_CUDA_CHECK(cudaEventRecord(d0.ev, d0.stream));
      for (int d : peers)
        TPC_CUDA_CHECK(cudaStreamWaitEvent(devs[d].stream, d0.ev, 0));
      ran = runSteps(t);
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
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    TPC_CUDA_CHECK(e);
    it = graphs.emplace(shape, exec).first;
  }
  TPC_CUDA_CHECK(cudaGraphLaunch(it->second, d0.stream));
  return {};
}

} // namespace tpc::rt::cuda
