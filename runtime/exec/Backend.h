//===- Backend.h - backends and the registry `tpc run` picks from -*- C++ -*-===//
//
// A Backend opens plans into Sessions (Session.h). Which backends exist is decided where they are linked,
// never here: runtime/exec knows no backend. The built-in registry (runtime/backends/Backends.h, library
// tpc_runtime) adds the CPU backend and, when built, the CUDA one; a test or a later launcher may build
// its own registry. `auto` picks the first usable backend in the order they were added, skipping without
// probing those whose mayBePresent() fails (the CUDA plugin is not even loaded on a machine without a GPU).
//
// Usage:
//   const BackendRegistry &r = builtinBackends();          // runtime/backends/Backends.h
//   auto s = r.open("auto", std::move(plan), options);     // or "cpu", "cuda"
//   if (!s) fail(s.message());   // "unknown backend 'x'; this build has: cpu, cuda (...)"
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_BACKEND_H
#define TPC_RUNTIME_EXEC_BACKEND_H

#include "runtime/exec/HostStepRunner.h"
#include "runtime/exec/Session.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::rt {

/// A way to run plans (the CPU thread groups, CUDA GPUs, ...).
class Backend {
public:
  virtual ~Backend() = default;
  /// The name `--backend` takes ("cpu", "cuda").
  virtual std::string name() const = 0;
  /// Whether it can run on this machine; the error says why not (no GPU visible, not built). May load
  /// libraries (the CUDA plugin).
  virtual Expected<void> usable() const = 0;
  /// A cheap check that loads nothing (device nodes, not the driver): an error means it cannot be usable
  /// here, and `auto` skips it without calling usable(). Default: may be.
  virtual Expected<void> mayBePresent() const;
  /// Opens `plan` (the checks of exec::prepareOpen, then the backend's own); the error is one line.
  virtual Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts) const = 0;
  /// A runner for steps on host memory with `threads` worker threads (0: all cores), for the host-placed
  /// steps of an accelerator backend; null when this backend cannot run steps on the host.
  virtual std::unique_ptr<exec::HostStepRunner> hostStepRunner(int threads) const;
};

/// A backend that this build or machine lacks, listed so that asking for it says why.
std::unique_ptr<Backend> makeUnavailableBackend(std::string name, std::string reason);

/// The backends a program can open plans on, in `auto` order.
class BackendRegistry {
public:
  /// Adds `b`; `auto` prefers backends added earlier. A second backend of the same name replaces the first.
  void add(std::unique_ptr<Backend> b);
  /// The backend called `name`, or null.
  const Backend *find(const std::string &name) const;
  /// Every backend's name, in `auto` order.
  std::vector<std::string> names() const;
  /// The backend `name` asks for ("auto": the first usable one of those that may be present). Errors are
  /// one line: an unknown name lists the backends of this build, an unusable one says why.
  Expected<const Backend *> select(const std::string &name) const;
  /// select(name), then Backend::open.
  Expected<std::unique_ptr<Session>> open(const std::string &name, Plan plan,
                                          const SessionOptions &opts) const;

private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_EXEC_BACKEND_H
