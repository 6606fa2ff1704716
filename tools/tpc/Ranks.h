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
/// rank of an MPI job (see the file comment). In-process the plan is what `loadInProcess` returns (the
/// plan file loaded, or a GGUF compiled in memory: ModelSource.h's loadModel); a rank loads the plan file
/// itself and refuses a GGUF (every rank must run the same plan: compile it first). Errors throw Failure
/// (one line). `options.ordinals` are the GPUs to pick from (CUDA ranks take the local rank's). `takeVocab`:
/// rank 0 moves the plan's tokenizer into it before its session opens (the session never reads it), so the
/// user side builds its Tokenizer while the process is still small instead of from a copy of
/// `session.plan().tokenizer`; in-process, `loadInProcess` does the same. An exception it throws stops
/// every rank at the open agreement. Ranks other than 0 drop the tokenizer.
void runOnPlan(const std::string &planPath, const std::function<rt::Plan()> &loadInProcess,
               rt::SessionOptions options, const std::string &backend,
               const std::function<void(rt::Session &)> &userSide,
               const std::function<void(rt::PlanTokenizer)> &takeVocab = nullptr);

/// Drops this process's resident pages of LLVM's and MLIR's shared-library code, and of the libraries only
/// they load (z3, libxml2, ICU) (MADV_DONTNEED on their
/// read-only private file mappings; a page that runs again comes back from the page cache). A plan run
/// never calls the compiler, but the loader and LLVM's static constructors (every cl::opt of every target)
/// fault in ~36 MiB of libLLVM's text in every tpc process, as much as a rank's activations. Returns the
/// bytes of the mappings released (0 off Linux, or where the compiler is linked statically).
size_t releaseCompilerCode();

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_RANKS_H
