//===- ModelSource.h - a plan file, or a GGUF compiled in memory ---*- C++ -*-===//
//
// What `tpc run` and `tpc serve` take as their model: a plan written by `tpc compile`, or a GGUF, which they
// compile in memory with the flags `tpc compile` takes (--devices, --tensor-split, --override-tensor,
// --no-kv-offload, --max-batch) and then run, as a llama.cpp user runs `-m model.gguf`. Those flags are
// declared here once (addCompileFlags) for compile and for every command that runs a model, so their
// spellings, checks and help cannot drift apart. Which kind a file is is decided by its magic
// (detectFileKind), also for `tpc inspect`. A build without the compiler (TPC_ENABLE_COMPILER=OFF) refuses a
// GGUF with one line saying so. Errors throw tpc::cli::Failure (one line naming the file or flag).
//
// Usage (a command's registration and callback):
//   auto flags = std::make_shared<CompileFlags>();
//   addCompileFlags(*cmd, *flags);
//   ... rt::Plan plan = loadModel(path, *flags, "--gguf", &timeline);
// A command that runs a model and still calls loadPlan() directly (`tpc perplexity`, when it lands) gets
// the GGUF path from exactly these two calls, plus a test like test/tools/run-gguf.test.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_MODELSOURCE_H
#define TPC_TOOLS_TPC_MODELSOURCE_H

#include "runtime/plan/PlanFormat.h"
#include "runtime/support/Expected.h"
#include "runtime/support/Timeline.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpc::cli {

/// The compile flags as given on a command line (addCompileFlags fills them).
struct CompileFlags {
  int64_t devices = 1;
  std::string tensorSplit;                 ///< "3,2,1"
  std::vector<std::string> overrideTensor; ///< each "REGEX=cpu[,REGEX=cpu...]"
  bool noKvOffload = false;
  int64_t maxBatch = 512;
  int64_t maxOutputRows = 64;
  std::string moeSplit = "auto"; ///< auto, intermediate or expert
  std::string routingProfile;     ///< for auto: per-layer tokens per expert (empty: uniform)
  std::string cacheTypeK = "f16"; ///< --cache-type-k (-ctk): f16, q8_0, q4_0 or f32
  std::string cacheTypeV = "f16"; ///< --cache-type-v (-ctv)
  int64_t stages = 1;             ///< --stages: pipeline stages (StageFlags.cpp)
  std::string stageLayers;        ///< --stage-layers "20,28"
  std::vector<CLI::Option *> options; ///< the declared options, to tell which were given
  CLI::Option *devicesOption = nullptr;
  /// --comm-dtype: recorded in the plan by `tpc compile`, and a run-time override of the plan's (so not in
  /// `options`, which a plan file refuses).
  std::string commDtype = "f32";
  CLI::Option *commDtypeOption = nullptr;
};

/// Declares --devices, --tensor-split (-ts), --override-tensor (-ot), --no-kv-offload (-nkvo),
/// --cache-type-k / -v (-ctk / -ctv), --comm-dtype and --max-batch, --max-output-rows, --moe-split,
/// --routing-profile on `cmd` (main.cpp turns llama.cpp's multi-letter spellings into the long ones).
void addCompileFlags(CLI::App &cmd, CompileFlags &flags);

/// The checked compile flags, as the compiler takes them.
struct CompileRequest {
  int64_t devices = 1;
  std::vector<double> tensorSplit; ///< one positive share per device, or empty (even split)
  std::vector<std::string> overrideTensor; ///< one `REGEX=cpu` per entry, target lower-cased
  bool noKvOffload = false;
  int64_t maxBatch = 512;
  int64_t maxOutputRows = 64;
  std::string moeSplit = "auto";
  std::string routingProfile;
  /// Storage of the attention caches' K and V halves (rt::isKvCacheType; the plan's per-position bytes come
  /// from these through rt::kvCellBytesK / kvCellBytesV). Recurrent states stay f32.
  GGMLType cacheTypeK = GGMLType::F16;
  GGMLType cacheTypeV = GGMLType::F16;
  rt::CommDtype commDtype = rt::CommDtype::F32; ///< --comm-dtype, recorded in the plan
  /// Pipeline stages: `devices` / `stages` devices each (checked to divide); layers per stage, or empty
  /// for the compiler's balanced cut.
  int64_t stages = 1;
  std::vector<int64_t> stageLayers;
};
/// Checks --stages and --stage-layers against the rest of `r` and fills them in (StageFlags.cpp); throws
/// Failure naming the flag.
void checkStageFlags(const CompileFlags &flags, CompileRequest &r);
/// Checks the flags (shares, override entries) and returns them; throws Failure naming the flag.
CompileRequest checkCompileFlags(const CompileFlags &flags);
/// "--devices" when some compile flag was given on the command line (the first), else "".
std::string givenCompileFlag(const CompileFlags &flags);

/// --comm-dtype when it was given on the command line (SessionOptions::commDtype: it overrides the plan's
/// at open, for a plan file as for a GGUF), else nothing.
std::optional<rt::CommDtype> commDtypeOverride(const CompileFlags &flags);

/// What a file is, by its first bytes.
enum class FileKind { GGUF, Plan, Unknown };
/// Reads the first bytes of `path` and classifies them; `head` receives them (for the error message).
/// Throws Failure when the file cannot be read.
FileKind detectFileKind(const std::string &path, std::string &head);
/// "47 47 4d 4c" for the first bytes of an unknown file.
std::string hexBytes(const std::string &s);

/// The plan to run for `path`: the plan file loaded (every loader check applies; compile flags are
/// refused, naming the first one given), or the GGUF compiled in memory with `flags` (`ggufFlag`, the
/// command's option naming a moved GGUF, must then be empty: pass "" when it was not given). Marks
/// "plan load" or "compile" on `timeline` when set.
rt::Plan loadModel(const std::string &path, const CompileFlags &flags, const std::string &ggufFlag,
                   Timeline *timeline);

/// Imports, partitions and emits `gguf` in memory. Defined by the compiler (compiler/CompileCommand.cpp)
/// when tpc is built with it; otherwise an error saying that it is not. The error is one line.
Expected<rt::Plan> compileGgufToPlan(const std::string &gguf, const CompileRequest &request);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_MODELSOURCE_H
