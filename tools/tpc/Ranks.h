//===- Ranks.h - open a plan in-process or as one rank of an MPI job -*- C++ -*-===//
//
// The commands that run a plan (`tpc run`, and any other written against rt::Session) open it through
// runOnPlan(). Started by hand, it does what `tpc run` always did: load the plan, pick the backend, open
// every device in this process, run the command's user side. Started by `mpirun -np N` or `srun -n N`
// (comm::detectMpiLaunch), this process is rank r of N and runs only plan device r:
//   1. MPI_Init (comm::MpiWorld); a SIGTERM from the launcher (another rank died) prints one line naming
//      this rank before the process ends, so no rank ends silently.
//   2. Agreement: every rank loads its plan, checks N against the plan's device count, its GGUF against
//      the plan (size and fingerprint) and the backend, then all ranks exchange the outcome with a hash of
//      the plan file; any failure or a plan that differs from rank 0's is one line on every rank, naming
//      the rank, its host and what to do, and every rank exits 1 (nobody has started working together,
//      so nobody waits).
//   3. Open: SessionOptions::devices = {r}, the MPI communicator (CPU ranks) or a GPU one (CUDA ranks:
//      NCCL from a unique id rank 0 broadcasts, or MPI on host-staged buffers where ranks share a GPU);
//      the outcome is exchanged again, so an allocation failure on one rank also ends every rank cleanly.
//   4. Rank 0 runs the user side on a LeaderSession (Lockstep.h); the others follow its calls. A failure
//      while the devices run ends the whole job (MPI_Abort): a peer inside a collective cannot be
//      reached otherwise. The launcher then names the rank that aborted or died.
// Threads per rank (SessionOptions::threads = 0): the CPUs this process may run on (the launcher may bind
// it) shared with the other ranks on its host.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_RANKS_H
#define TPC_TOOLS_TPC_RANKS_H

#include "runtime/exec/Session.h"

#include <functional>
#include <string>

namespace tpc::cli {

/// Opens `planPath` on `backend` with `options` and runs `userSide` on the session, in-process or as a
/// rank of an MPI job (see the file comment). Errors throw Failure (one line). `options.ordinals` are the
/// GPUs to pick from (CUDA ranks take the local rank's).
void runOnPlan(const std::string &planPath, rt::SessionOptions options, const std::string &backend,
               const std::function<void(rt::Session &)> &userSide);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_RANKS_H
