//===- Executor.h - the executor's public surface -----------------*- C++ -*-===//
//
// What a program that runs plans includes: sessions and their options (Session.h), backends and the
// registry (Backend.h), the plan loader (PlanIO.h). Opening by backend name needs the built-in registry,
// runtime/backends/Backends.h (library tpc_runtime); Session::open("cpu" by default) is defined there.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_EXECUTOR_H
#define TPC_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/Session.h"
#include "runtime/plan/PlanIO.h"

#endif // TPC_RUNTIME_EXEC_EXECUTOR_H
