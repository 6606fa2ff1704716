//===- MpiWorld.cpp - MPI_Init, ranks, hosts, the string all-gather --------===//
//
// The world communicator is duplicated with MPI_ERRORS_RETURN, so that an MPI failure inside tpc's
// calls is a returned code (MPI_COMM_WORLD keeps the launcher's default handler for everything else).
//===----------------------------------------------------------------------===//
#include "runtime/comm/MpiWorld.h"

#include <fmt/core.h>
#include <mpi.h>

#include <cstdlib>

namespace tpc::rt::comm {

std::string MpiWorld::errorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(len));
}

namespace {
std::string mpiError(int code) { return MpiWorld::errorText(code); }

MPI_Comm commOf(const void *h) { return *static_cast<const MPI_Comm *>(h); }
} // namespace

Expected<std::shared_ptr<MpiWorld>> MpiWorld::init() {
  using E = Expected<std::shared_ptr<MpiWorld>>;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return Error{"MPI is already initialised in this process (one MpiWorld per process)"};
  int provided = 0;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS)
    return Error{"MPI_Init_thread failed: " + mpiError(rc)};
  std::shared_ptr<MpiWorld> w(new MpiWorld());
  if (provided < MPI_THREAD_SERIALIZED)
    return Error{fmt::format("this MPI library provides thread level {} but tpc needs MPI_THREAD_SERIALIZED; "
                             "use an MPI built with thread support",
                             provided)};
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  w->host_.assign(name, static_cast<size_t>(len));
  auto *comm = new MPI_Comm(MPI_COMM_NULL);
  w->comm_ = std::shared_ptr<void>(comm, [](void *p) {
    auto *c = static_cast<MPI_Comm *>(p);
    if (*c != MPI_COMM_NULL)
      MPI_Comm_free(c);
    delete c;
  });
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, comm); rc != MPI_SUCCESS)
    return Error{"MPI_Comm_dup failed: " + mpiError(rc)};
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  MPI_Comm local = MPI_COMM_NULL;
  if (int rc = MPI_Comm_split_type(*comm, MPI_COMM_TYPE_SHARED, w->rank_, MPI_INFO_NULL, &local);
      rc != MPI_SUCCESS)
    return Error{"MPI_Comm_split_type failed: " + mpiError(rc)};
  MPI_Comm_rank(local, &w->localRank_);
  MPI_Comm_size(local, &w->localSize_);
  MPI_Comm_free(&local);
  return E(std::move(w));
}

MpiWorld::~MpiWorld() {
  comm_.reset(); // MPI_Comm_free before MPI_Finalize
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

std::string MpiWorld::who() const { return who(rank_, size_, host_); }

std::string MpiWorld::who(int rank, int size, const std::string &host) {
  return host.empty() ? fmt::format("rank {} of {}", rank, size)
                      : fmt::format("rank {} of {} (host {})", rank, size, host);
}

Expected<std::vector<std::string>> MpiWorld::allGather(const std::string &mine) const {
  const MPI_Comm c = commOf(handle());
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  if (int rc = MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, c); rc != MPI_SUCCESS)
    return Error{"MPI_Allgather failed: " + mpiError(rc)};
  int total = 0;
  for (int r = 0; r < size_; ++r)
    displs[r] = total, total += lens[r];
  std::string all(static_cast<size_t>(total), '\0');
  if (int rc = MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, c);
      rc != MPI_SUCCESS)
    return Error{"MPI_Allgatherv failed: " + mpiError(rc)};
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r])));
  return out;
}

void MpiWorld::abortJob(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code); // MPI_Abort does not return; if it did, the process must still end
}

} // namespace tpc::rt::comm
