//===- ReadProbe.cuh - the read bandwidth of a GPU's memory -------*- C++ -*-===//
//
// The decode roofline's denominator (`tpc run --bench`): decode reads every weight once per token and writes
// almost nothing, so its bound is the memory's read bandwidth, not its copy bandwidth (which counts a write
// per byte read and runs below the read rate on every memory measured).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_READPROBE_CUH
#define TPC_RUNTIME_CUDA_READPROBE_CUH

namespace tpc::rt::cuda {

/// Bytes per second read by a kernel that streams a buffer of up to 1 GiB (a quarter of the free memory at
/// most, far past the L2) with 16-byte loads on every SM; the best of 5 timed runs after a warm-up. 0 when
/// it cannot be measured (too little free memory, a CUDA error, which is cleared).
double deviceReadBandwidth(int gpu);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_READPROBE_CUH
