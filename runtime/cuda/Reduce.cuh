//===- Reduce.cuh - block-wide reductions shared by the row kernels -*- CUDA -*-===//
//
// Device-only; included by the .cu files whose kernels reduce a row per block (rms_norm, softmax, the
// per-head norm in front of RoPE). One definition, so the fused kernels sum in the same order as the
// plain ones and give bit-identical results.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_REDUCE_CUH
#define TPC_RUNTIME_CUDA_REDUCE_CUH

namespace tpc::rt::cuda {

/// Block-wide sum (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float blockSum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads(); // red may still be read by a previous call
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Threads for a block that reduces a row of n: a multiple of 32 up to 1024.
inline unsigned rowThreads(int64_t n) {
  return static_cast<unsigned>(n < 32 ? 32 : n > 1024 ? 1024 : (n + 31) / 32 * 32);
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_REDUCE_CUH
