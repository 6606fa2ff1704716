//===- Ranks.cpp - the in-process path and the MPI rank path of runOnPlan ---===//
//
// The steps of Ranks.h. Every exchange between the ranks before they work together is an all-gather of
// each rank's outcome, so a failure on one rank is known to all of them at the same point and every rank
// leaves through the same door (a Failure, MPI_Finalize, exit 1): nothing waits for a rank that gave up.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Ranks.h"

#include "runtime/backends/Backends.h"
#include "runtime/comm/MpiLaunch.h"
#include "runtime/plan/PlanIO.h"
#include "tools/tpc/Command.h"
#include "tools/tpc/ModelSource.h"

#ifdef TPC_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/StageCommunicator.h"
#include "tools/tpc/GpuRanks.h"
#include "tools/tpc/Lockstep.h"

#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sched.h>
#include <thread>
#include <unistd.h>
#endif

#include <fmt/core.h>

#ifdef __linux__
#include <malloc.h>
#include <sys/mman.h>
#endif
#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tpc::cli {

using namespace tpc::rt;

#ifdef __linux__
size_t releaseCompilerCode() {
  static const char *const kCompilerLibraries[] = {"/libLLVM", "/libMLIR", "/libz3", "/libxml2", "/libicu"};
  std::ifstream smaps("/proc/self/smaps");
  size_t released = 0;
  uintptr_t lo = 0, hi = 0;
  bool candidate = false, privatePages = false;
  auto finish = [&] {
    if (candidate && !privatePages && hi > lo && ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED) == 0)
      released += hi - lo;
    candidate = privatePages = false;
  };
  for (std::string line; std::getline(smaps, line);) {
    std::istringstream in(line);
    std::string first, perms, offset, dev, inode, path;
    in >> first >> perms >> offset >> dev >> inode >> path;
    if (size_t dash = first.find('-'); dash != std::string::npos && first.back() != ':') {
      finish();
      lo = std::stoull(first.substr(0, dash), nullptr, 16);
      hi = std::stoull(first.substr(dash + 1), nullptr, 16);
      // Code (read + execute, private, never written) of LLVM's or MLIR's shared libraries and of the
      // libraries only LLVM loads (z3, libxml2 and its ICU).
      candidate = perms == "r-xp" && std::any_of(std::begin(kCompilerLibraries), std::end(kCompilerLibraries),
                                                 [&](const char *lib) { return path.find(lib) != std::string::npos; });
    } else if (first == "Anonymous:" && perms != "0") { // `perms` holds the field's value here
      privatePages = true; // written (a debugger's breakpoint): its copy must stay
    }
  }
  finish();
  return released;
}
#else
size_t releaseCompilerCode() { return 0; }
#endif

namespace {

void runInProcess(const std::function<Plan()> &load, const SessionOptions &options, const std::string &backend,
                  const std::function<void(Session &)> &userSide) {
  Plan plan = load();
  releaseCompilerCode(); // after load: it may have compiled a GGUF
  auto be = builtinBackends().select(backend);
  if (!be)
    throw Failure("--backend: " + be.message());
  auto session = (*be)->open(std::move(plan), options);
  ::malloc_trim(0);
  if (!session)
    throw Failure(session.message());
  userSide(**session);
}

#ifdef TPC_HAVE_MPI
// The line a rank prints when the launcher ends it (async-signal-safe: written by write(2) from a buffer
// filled before the signal can arrive).
char gTermLine[512];
size_t gTermLen = 0;

extern "C" void onLauncherTerm(int) {
  if (gTermLen)
    (void)!::write(STDERR_FILENO, gTermLine, gTermLen);
  ::_exit(128 + SIGTERM);
}

/// Keeps MPI up until the process exits: every rank prints its error (main does, after runOnPlan throws)
/// before MPI_Finalize, whose fence keeps a rank that exits first from having the launcher end the others
/// before they printed theirs. The SIGTERM line is switched off first: the job is over.
void finalizeAtExit(std::shared_ptr<comm::MpiWorld> world) {
  static auto *held = new std::shared_ptr<comm::MpiWorld>(); // never destroyed: reset at exit
  *held = std::move(world);
  std::atexit([] {
    std::signal(SIGTERM, SIG_DFL);
    held->reset();
  });
}

void announceTermination(const comm::MpiWorld &w) {
  const std::string line = fmt::format("tpc: {}: ended by the launcher (SIGTERM): the job stops because another "
                                       "rank failed or was killed (the launcher's message names it)\n",
                                       w.who());
  gTermLen = std::min(line.size(), sizeof(gTermLine));
  std::memcpy(gTermLine, line.data(), gTermLen);
  struct sigaction sa {};
  sa.sa_handler = onLauncherTerm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

/// FNV-1a of the plan file: ranks compare it to find a host with another plan.
uint64_t planFileHash(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 1469598103934665603ull;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it)
    h = (h ^ static_cast<uint8_t>(*it)) * 1099511628211ull;
  return h;
}

/// CPU threads for this rank when -t is not given: the CPUs it may run on (the launcher may bind it to
/// some), but no more than its share of the host among the ranks there.
int threadsPerRank(int localRanks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int allowed = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : hw;
  return std::max(1, std::min(allowed, hw / std::max(1, localRanks)));
}

/// One rank's outcome of a start-up step, as exchanged: "<plan hash>\n<backend>\n<host>\n<error>".
struct Outcome {
  uint64_t planHash = 0;
  std::string backend, host, error;
};
std::string encode(const Outcome &o) {
  return fmt::format("{:016x}\n{}\n{}\n{}", o.planHash, o.backend, o.host, o.error);
}
Outcome decode(const std::string &s) {
  std::vector<std::string> f;
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t nl = s.find('\n', at);
    if (nl == std::string::npos)
      return {0, "", "", "sent an unreadable status (do all ranks run the same tpc?)"};
    f.push_back(s.substr(at, nl - at));
    at = nl + 1;
  }
  return {std::strtoull(f[0].c_str(), nullptr, 16), f[1], f[2], s.substr(at)};
}

/// Exchanges `mine` with every rank and throws the Failure every rank prints when one of them failed or
/// (`comparePlans`) runs another plan than rank 0; `step` names the step in the message.
void agree(const comm::MpiWorld &w, const Outcome &mine, const char *step, bool comparePlans) {
  auto all = w.allGather(encode(mine));
  if (!all)
    throw Failure(fmt::format("{}: {}: {}", w.who(), step, all.message()));
  std::vector<Outcome> out;
  for (const std::string &s : *all)
    out.push_back(decode(s));
  int failed = 0, first = -1;
  for (int r = 0; r < w.size(); ++r)
    if (!out[r].error.empty() && failed++ == 0)
      first = r;
  if (failed) {
    if (!mine.error.empty())
      throw Failure(fmt::format("{}: {}", w.who(), mine.error));
    throw Failure(fmt::format("{}: stopped at {}: {}: {}{}", w.who(), step,
                              comm::MpiWorld::who(first, w.size(), out[first].host), out[first].error,
                              failed > 1 ? fmt::format(" ({} ranks failed; each printed its error)", failed) : ""));
  }
  if (!comparePlans)
    return;
  for (int r = 1; r < w.size(); ++r) {
    if (out[r].backend != out[0].backend)
      throw Failure(fmt::format("{}: {} picked the {} backend, {} the {} backend; every rank must run the same "
                                "one: pass --backend cpu or --backend cuda",
                                w.who(), comm::MpiWorld::who(r, w.size(), out[r].host), out[r].backend,
                                comm::MpiWorld::who(0, w.size(), out[0].host), out[0].backend));
    if (out[r].planHash != out[0].planHash)
        throw Failure(fmt::format("{}: {} runs another plan than {} (plan file hash {:016x}, rank 0's {:016x}); "
                                  "every rank must run the same plan file: copy plan.bin to every host",
                                  w.who(), comm::MpiWorld::who(r, w.size(), out[r].host),
                                  comm::MpiWorld::who(0, w.size(), out[0].host), out[r].planHash,
                                  out[0].planHash));
  }
}

void runAsRank(const comm::MpiLaunch &launch, const std::string &planPath, SessionOptions options,
               const std::string &backend, const std::function<void(Session &)> &userSide,
               const std::function<void(PlanTokenizer)> &takeVocab) {
  auto started = comm::MpiWorld::init();
  if (!started)
    throw Failure(fmt::format("started by {} ({}): {}", launch.launcher, launch.evidence, started.message()));
  std::shared_ptr<comm::MpiWorld> world = *started;
  const comm::MpiWorld &w = *world;
  announceTermination(w);
  finalizeAtExit(world);
  releaseCompilerCode();

  // 1. Agreement: the plan, the rank count, the GGUF, the backend.
  Outcome mine{0, "", w.host(), ""};
  Expected<Plan> plan = loadPlan(planPath);
  const Backend *be = nullptr;
  if (!plan) {
    mine.error = plan.message();
  } else if (int(plan->devices.size()) != w.size()) {
    mine.error = fmt::format("{} started {} ranks but plan '{}' has {} device(s); start one rank per device "
                             "(mpirun -np {})",
                             launch.launcher, w.size(), planPath, plan->devices.size(), plan->devices.size());
  } else if (auto gguf = checkPlanGguf(*plan, options.ggufPath); !gguf) {
    mine.error = gguf.message();
  } else if (auto b = builtinBackends().select(backend); !b) {
    mine.error = "--backend: " + b.message();
  } else {
    be = *b;
    mine.backend = be->name();
    mine.planHash = planFileHash(planPath);
  }
  agree(w, mine, "open", true);

  // 2. Open plan device `rank` with the communicators of its backend. Only rank 0 tokenizes: the others
  // drop the plan's vocabulary (Gemma 3's 262144 entries are several MiB of strings per rank).
  if (w.rank() != 0) {
    plan->tokenizer = PlanTokenizer{};
  } else if (takeVocab && mine.error.empty()) {
    try {
      takeVocab(std::move(plan->tokenizer));
    } catch (const std::exception &e) {
      mine.error = e.what();
    }
  }
  options.devices = {w.rank()};
  if (options.threads <= 0)
    options.threads = threadsPerRank(w.localSize());
  const comm::MpiSums sums =
      std::getenv("TPC_MPI_SUMS") && std::string(std::getenv("TPC_MPI_SUMS")) == "native" ? comm::MpiSums::Native
                                                                                       : comm::MpiSums::RankOrder;
  auto control = std::make_shared<comm::MpiCommunicator>(world, sums); // rank 0's calls
  auto collectives = std::make_shared<comm::MpiCommunicator>(world, sums);
  std::string via = "MPI";
  if (be->name() == "cuda") {
    auto gpu = gpuRankCommunicator(w, collectives, *plan, options);
    if (!gpu)
      mine.error = gpu.message();
    else
      options.comm = gpu->comm, via = gpu->via;
  } else if (plan && plan->stages > 1) {
    // Pipeline stages: stage s is the s-th group of devices / stages ranks (hostfile order); its
    // collectives run on that group's communicator, Send/Recv on the world's (MPI point to point).
    const int per = w.size() / static_cast<int>(plan->stages);
    std::vector<std::shared_ptr<comm::Communicator>> stages(plan->stages);
    stages[static_cast<size_t>(w.rank() / per)] =
        std::make_shared<comm::MpiCommunicator>(world, w.rank() / per, sums);
    options.comm = std::make_shared<comm::StageCommunicator>(collectives, std::move(stages), false);
    via = fmt::format("MPI, {} stages", plan->stages);
  } else {
    options.comm = collectives;
  }
  Expected<std::unique_ptr<Session>> session = Error{mine.error};
  if (mine.error.empty())
    session = be->open(std::move(*plan), options);
  ::malloc_trim(0);
  mine.error = session ? "" : session.message();
  agree(w, mine, "open", false);

  // 3. Rank 0 runs the user's side; the others run its calls.
  if (w.rank() != 0) {
    auto end = follow(**session, *control);
    if (!end) {
      fmt::print(stderr, "tpc: {}: error: {}; ending the job\n", w.who(), end.message());
      w.abortJob(1);
    }
    if (*end == LeaderEnd::Failed)
      throw Failure(fmt::format("{}: rank 0 stopped with an error (its message says why); stopping too", w.who()));
    return;
  }
  LeaderSession leader(session.take(), *control,
                       fmt::format("{}, {} ranks over {}", be->name() == "cuda" ? "CUDA" : "CPU", w.size(), via));
  try {
    userSide(leader);
  } catch (const std::exception &e) {
    if (leader.failedWhileRunning()) { // a peer may wait inside a collective: end the job
      fmt::print(stderr, "tpc: {}: error: {}; ending the job\n", w.who(), e.what());
      w.abortJob(1);
    }
    (void)leader.finish(false);
    throw;
  }
  if (Expected<void> ok = leader.finish(true); !ok)
    throw Failure(fmt::format("{}: telling the other ranks that the run ended: {}", w.who(), ok.message()));
}
#endif

} // namespace

void runOnPlan(const std::string &planPath, const std::function<Plan()> &loadInProcess, SessionOptions options,
               const std::string &backend, const std::function<void(Session &)> &userSide,
               const std::function<void(PlanTokenizer)> &takeVocab) {
  const comm::MpiLaunch launch = comm::detectMpiLaunch();
  if (!launch.launched)
    return runInProcess(loadInProcess, options, backend, userSide);
  std::string head;
  if (detectFileKind(planPath, head) == FileKind::GGUF)
    throw Failure(fmt::format("{} is a GGUF: under {} every rank runs the same plan file; compile one with "
                              "`tpc compile {} --devices N -o plan.bin` and run that",
                              planPath, launch.launcher, planPath));
#ifdef TPC_HAVE_MPI
  runAsRank(launch, planPath, std::move(options), backend, userSide, takeVocab);
#else
  throw Failure(fmt::format("started by {} ({}) but this tpc was built without MPI; install Open MPI "
                            "(scripts/install-deps.sh) and rebuild, or set TPC_MPI=0 to run every device in "
                            "this process",
                            launch.launcher, launch.evidence));
#endif
}

} // namespace tpc::cli
