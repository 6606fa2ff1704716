//===- MpiLaunch.cpp - the launchers' environment variables -----------------===//
//
// The first launcher whose variables are present and well formed wins, in the order of the header's
// table. A malformed value (not a number) counts as absent: MPI_Init would then run as a singleton, and
// the rank-count check at open names the mismatch.
//===----------------------------------------------------------------------===//
#include "runtime/comm/MpiLaunch.h"

#include <cstdlib>
#include <string>

namespace tpc::rt::comm {

namespace {
/// The value of `name` as an int >= `min`, or -1 when absent or malformed.
int intVar(const std::function<const char *(const char *)> &getenv, const char *name, int min) {
  const char *v = getenv(name);
  if (!v || !*v)
    return -1;
  char *end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end || x < min || x > (1 << 24)) ? -1 : static_cast<int>(x);
}
} // namespace

MpiLaunch detectMpiLaunch(const std::function<const char *(const char *)> &getenv) {
  MpiLaunch l;
  if (const char *off = getenv("TPC_MPI"); off && std::string(off) == "0")
    return l;
  struct Pair {
    const char *rank, *size, *launcher;
  };
  for (const Pair &p : {Pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"},
                        Pair{"PMI_RANK", "PMI_SIZE", "PMI"},
                        Pair{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "srun (Slurm)"}}) {
    const int rank = intVar(getenv, p.rank, 0), size = intVar(getenv, p.size, 1);
    if (rank >= 0 && size >= 1 && rank < size) {
      l.launched = true;
      l.launcher = p.launcher;
      l.rank = rank;
      l.size = size;
      l.evidence = std::string(p.rank) + "=" + std::to_string(rank) + ", " + p.size + "=" + std::to_string(size);
      return l;
    }
  }
  if (const int rank = intVar(getenv, "PMIX_RANK", 0); rank >= 0) {
    l.launched = true;
    l.launcher = "PMIx";
    l.rank = rank;
    l.size = -1;
    l.evidence = "PMIX_RANK=" + std::to_string(rank);
  }
  return l;
}

MpiLaunch detectMpiLaunch() {
  return detectMpiLaunch([](const char *name) { return std::getenv(name); });
}

} // namespace tpc::rt::comm
