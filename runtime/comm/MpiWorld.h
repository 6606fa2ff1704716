//===- MpiWorld.h - MPI for one process of a tpc job ---------------*- C++ -*-===//
//
// The process's membership in an MPI job: MPI_Init_thread when created, MPI_Finalize when the last owner
// lets go. Create it only when detectMpiLaunch() (MpiLaunch.h) says a launcher started the process, so a
// plain `tpc run` never initialises MPI. One MpiWorld per process (MPI can be initialised once).
//
// Everything the launcher glue needs besides the plan's collectives (MpiCommunicator.h): rank, size, the
// rank among the ranks on the same host (which GPU to take), the host name (messages), an all-gather of
// strings for the agreement at open (fingerprints, errors), and abortJob() for a failure after the ranks
// started working together: a peer blocked in a collective cannot be released any other way, so the
// whole job ends (MPI_Abort; the launcher kills the other ranks and names the one that aborted).
//
// MPI errors are returned, not fatal (MPI_ERRORS_RETURN on the world), so they become one-line errors.
// Threads: MPI_THREAD_SERIALIZED is requested; tpc calls MPI from one thread at a time (the CPU session of
// a rank runs its one device on the caller's thread).
//
// Usage:
//   auto world = comm::MpiWorld::init();             // only when detectMpiLaunch().launched
//   if (!world) fail(world.message());
//   auto all = (*world)->allGather("my status");    // every rank's string, in rank order
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_MPIWORLD_H
#define TPC_RUNTIME_COMM_MPIWORLD_H

#include "runtime/support/Expected.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::rt::comm {

/// This process's part of the MPI job (see the file comment).
class MpiWorld {
public:
  /// Initialises MPI; the error is one line (MPI failed to start, or lacks thread support).
  static Expected<std::shared_ptr<MpiWorld>> init();
  ~MpiWorld();
  MpiWorld(const MpiWorld &) = delete;
  MpiWorld &operator=(const MpiWorld &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This rank's index among the ranks on its host, and how many there are (MPI_COMM_TYPE_SHARED).
  int localRank() const { return localRank_; }
  int localSize() const { return localSize_; }
  /// MPI_Get_processor_name.
  const std::string &host() const { return host_; }
  /// "rank 1 of 2 (host node7)", the prefix of this rank's messages.
  std::string who() const;
  /// The same for another rank, with its host when `hosts` (from allGather) has it.
  static std::string who(int rank, int size, const std::string &host);

  /// Every rank's `mine` in rank order (lengths may differ). Every rank must call it.
  Expected<std::vector<std::string>> allGather(const std::string &mine) const;
  /// Ends the whole job now with exit code `code` (MPI_Abort on the world). Never returns.
  [[noreturn]] void abortJob(int code) const;
  /// MPI_Error_string of an MPI return code (one line).
  static std::string errorText(int code);
  /// The world communicator (an MPI_Comm) for MpiCommunicator; opaque so that this header needs no mpi.h.
  const void *handle() const { return comm_.get(); }

private:
  MpiWorld() = default;
  int rank_ = 0, size_ = 1, localRank_ = 0, localSize_ = 1;
  std::string host_;
  std::shared_ptr<void> comm_; ///< MPI_Comm (the world with MPI_ERRORS_RETURN)
};

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_MPIWORLD_H
