//===- MpiLaunch.h - was this process started by an MPI launcher? --*- C++ -*-===//
//
// `mpirun -np N tpc run plan.bin` (or `srun -n N tpc run ...`) starts N processes; each must know that it
// is one rank of a job before it opens the plan, and a process started by hand must not touch MPI at all,
// so that `tpc run` without a launcher behaves exactly as before MPI existed. detectMpiLaunch() decides
// from the environment the launchers set, without calling MPI (so it is built and tested without MPI):
//   Open MPI's mpirun          OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
//   MPICH / Hydra, PMI-1/2     PMI_RANK / PMI_SIZE
//   PMIx (srun --mpi=pmix)     PMIX_RANK (the size comes from MPI after MPI_Init)
//   Slurm's srun               SLURM_PROCID with SLURM_STEP_NUM_TASKS (set per job step: a batch script
//                              outside srun has SLURM_PROCID but is not a rank of a step)
// TPC_MPI=0 turns detection off (a job script that runs `tpc run` in-process inside an allocation).
// The rank and size found here are only for messages before MPI_Init; MpiWorld (MpiWorld.h) asks MPI.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_MPILAUNCH_H
#define TPC_RUNTIME_COMM_MPILAUNCH_H

#include <functional>
#include <string>

namespace tpc::rt::comm {

/// What the environment says about the launch.
struct MpiLaunch {
  bool launched = false; ///< started by an MPI launcher: call MPI_Init
  std::string launcher;  ///< "mpirun (Open MPI)", "PMI", "PMIx", "srun (Slurm)"; empty when not launched
  std::string evidence;  ///< the variables that decided it, e.g. "OMPI_COMM_WORLD_SIZE=2" (messages)
  int rank = 0;          ///< -1 when the launcher does not say before MPI_Init (PMIx)
  int size = 1;          ///< -1 when the launcher does not say before MPI_Init (PMIx)
};

/// Reads the launchers' variables through `getenv` (a test passes its own map).
MpiLaunch detectMpiLaunch(const std::function<const char *(const char *)> &getenv);
/// detectMpiLaunch over the process environment.
MpiLaunch detectMpiLaunch();

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_MPILAUNCH_H
