//===- CudaCheck.h - CUDA/cuBLAS error checks for the CUDA backend -*- C++ -*-===//
//
// One check macro per API family. A failing call throws tpc::rt::cuda::CudaError naming the expression,
// file and line (STYLE.md §6); the session turns it into a one-line error and refuses further calls.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_CUDACHECK_H
#define TPC_RUNTIME_CUDA_CUDACHECK_H

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tpc::rt::cuda {

/// A failed CUDA, cuBLAS or NCCL call, or a launcher precondition.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws CudaError for anything but cudaSuccess.
inline void checkCuda(cudaError_t e, const char *expr, const char *file, int line) {
  if (e != cudaSuccess)
    throw CudaError(std::string(expr) + ": " + cudaGetErrorString(e) + " (" + file + ":" +
                    std::to_string(line) + ")");
}

} // namespace tpc::rt::cuda

#define TPC_CUDA_CHECK(expr) ::tpc::rt::cuda::checkCuda((expr), #expr, __FILE__, __LINE__)
/// A launcher precondition; a violation is a bug in the caller (the session checks plans at open).
#define TPC_CUDA_ASSERT(cond, msg)                                                                           \
  do {                                                                                                       \
    if (!(cond))                                                                                             \
      throw ::tpc::rt::cuda::CudaError(std::string("cuda launcher: ") + (msg));                              \
  } while (0)

#endif // TPC_RUNTIME_CUDA_CUDACHECK_H
