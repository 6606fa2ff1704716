//===- CudaBackend.h - the CUDA Backend the registry adds ---------*- C++ -*-===//
//
// makeCudaBackend() is what the built-in registry (runtime/backends) adds when CUDA is built: "cuda",
// usable when a GPU is visible, opening CudaSessions (CudaSession.h) with SessionOptions::ordinals as
// CudaOptions::gpus and SessionOptions::progress as the upload progress bar; TPC_CUDA_NO_FUSE=1 in the
// environment turns run-time fusion off (A/B benchmarks). Host-placed steps run on the HostStepRunner of
// the CPU Backend object it is given, so runtime/cuda includes no CPU header.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_CUDABACKEND_H
#define TPC_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/exec/Backend.h"

#include <memory>

namespace tpc::rt::cuda {

/// The CUDA backend; `hostCpu` (the CPU backend, which must outlive it) runs host-placed steps.
std::unique_ptr<Backend> makeCudaBackend(const Backend &hostCpu);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_CUDABACKEND_H
