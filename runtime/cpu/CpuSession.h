//===- CpuSession.h - open a plan on the CPU backend --------------*- C++ -*-===//
//
// The CPU backend's session: per plan device it runs, one weight, one activation (+ host activation) and
// one KV allocation in host memory (no allocation while running), the weights copied from the GGUF piece
// by piece, and a thread group. Every step but the collectives goes through the device's CpuStepRunner
// (the backend's HostStepRunner, CpuBackend.h); collectives through exec::CollectiveRunner on the
// session's communicator (an InProcessCommunicator unless SessionOptions::comm gives one). Devices run on
// their own threads, meeting at collectives; the first device of the session runs on the caller.
// Placement changes nothing here: all of a CPU "device" is host memory.
//
// Opening checks exec::prepareOpen's list, then that the arenas of all of the session's devices fit the
// machine's RAM and each SessionOptions::maxDeviceBytes. Errors are one line naming what is wrong.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_CPUSESSION_H
#define TPC_RUNTIME_CPU_CPUSESSION_H

#include "runtime/exec/Session.h"

#include <memory>

namespace tpc::rt::cpu {

/// Opens `plan` on the CPU backend (see the file comment); the error is one line.
Expected<std::unique_ptr<Session>> openCpuSession(Plan plan, const SessionOptions &opts);

/// Copy bandwidth of host memory with `threads` threads, each copying its share of two 256 MiB buffers:
/// the best of 3 copies after a warm-up, read + write counted (the CPU's decode roofline denominator).
double hostCopyBandwidth(int threads);

/// Read bandwidth of host memory with `threads` threads, each summing its share of one buffer of 4 times
/// the last-level cache and at least 512 MiB (what decode does with the weights): the best of 4 passes
/// after a warm-up (the CPU's decode roofline denominator).
double hostReadBandwidth(int threads);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_CPUSESSION_H
