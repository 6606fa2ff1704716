//===- MpiLaunchTest.cpp - which environments mean "started by an MPI launcher" ===//
//
// detectMpiLaunch() decides whether `tpc run` initialises MPI, so a plain run must never be taken for a
// rank and every launcher's variables must be: Open MPI's mpirun, PMI (MPICH/Hydra, Slurm's pmi2), PMIx,
// srun (a step's task, not a batch script that merely has SLURM_PROCID), TPC_MPI=0 overriding all of
// them, and malformed values ignored. Built and run without MPI.
//===----------------------------------------------------------------------===//
#include "runtime/comm/MpiLaunch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace tpc::rt::comm;

namespace {

MpiLaunch detect(const std::map<std::string, std::string> &env) {
  return detectMpiLaunch([&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(MpiLaunch, APlainProcessIsNoRank) {
  const MpiLaunch l = detect({{"PATH", "/usr/bin"}, {"HOME", "/root"}});
  EXPECT_FALSE(l.launched);
  EXPECT_EQ(l.launcher, "");
  EXPECT_EQ(l.size, 1);
}

TEST(MpiLaunch, EachLauncherIsRecognised) {
  MpiLaunch l = detect({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMIX_RANK", "1"}});
  EXPECT_TRUE(l.launched);
  EXPECT_EQ(l.launcher, "mpirun (Open MPI)");
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.size, 3);
  EXPECT_EQ(l.evidence, "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3");

  l = detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_TRUE(l.launched);
  EXPECT_EQ(l.launcher, "PMI");
  EXPECT_EQ(l.size, 2);

  l = detect({{"SLURM_PROCID", "2"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"}});
  EXPECT_TRUE(l.launched);
  EXPECT_EQ(l.launcher, "srun (Slurm)");
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.size, 4);

  l = detect({{"PMIX_RANK", "5"}}); // PMIx says the rank; the size comes from MPI
  EXPECT_TRUE(l.launched);
  EXPECT_EQ(l.launcher, "PMIx");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.size, -1);
}

TEST(MpiLaunch, ABatchScriptOutsideSrunIsNoRank) {
  // sbatch sets SLURM_PROCID and SLURM_NTASKS for the script itself; only srun's tasks have a step.
  EXPECT_FALSE(detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "77"}}).launched);
}

TEST(MpiLaunch, TpcMpiZeroTurnsDetectionOff) {
  EXPECT_FALSE(detect({{"TPC_MPI", "0"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).launched);
  EXPECT_TRUE(detect({{"TPC_MPI", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).launched);
}

TEST(MpiLaunch, MalformedValuesAreIgnored) {
  EXPECT_FALSE(detect({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).launched);
  EXPECT_FALSE(detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).launched); // rank >= size
  EXPECT_FALSE(detect({{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}).launched);
  EXPECT_FALSE(detect({{"PMIX_RANK", ""}}).launched);
  // A malformed first launcher does not hide a well-formed second one.
  const MpiLaunch l = detect({{"OMPI_COMM_WORLD_RANK", "x"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  EXPECT_TRUE(l.launched);
  EXPECT_EQ(l.launcher, "PMI");
}

} // namespace
