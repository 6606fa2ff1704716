//===- Backends.h - the backends this build has -------------------*- C++ -*-===//
//
// The composition root of the runtime: the one place that knows which backends exist. runtime/exec defines
// the Backend and Session interfaces and knows no backend; this library (tpc_runtime) links them and fills
// the registry `tpc run` (and later `tpc serve` and a launcher) picks from. Also defines Session::open.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_BACKENDS_BACKENDS_H
#define TPC_RUNTIME_BACKENDS_BACKENDS_H

#include "runtime/exec/Backend.h"

namespace tpc::rt {

/// The built-in backends, in `auto` order: "cuda" (usable when built and a GPU is visible; listed as not
/// built otherwise), then "cpu". Created on first use.
const BackendRegistry &builtinBackends();

} // namespace tpc::rt

#endif // TPC_RUNTIME_BACKENDS_BACKENDS_H
