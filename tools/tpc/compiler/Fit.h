//===- Fit.h - `tpc compile --fit`: a plan within memory budgets ---*- C++ -*-===//
//
// `tpc compile model.gguf --fit 24GiB,24GiB[,host=64GiB]` (or `--fit auto`: the CUDA devices' free memory)
// compiles the model and, while some device's total (rt::memoryAt at the plan's context: weights, KV,
// activations, logits rows) is over its budget, takes the next step in order of decode cost:
//   1. a smaller context: the largest of the start context (-c, else the model's training context) halved
//      step by step, down to --fit-ctx-min, that fits (a shorter context costs nothing per token);
//   2. q8_0, then q4_0 KV caches, down to the lowest --fit-kv allows (f16 when not given: never);
//   3. the other MoE split (whole experts per device, or every expert's intermediate dimension), where
//      --moe-split was left at auto;
//   4. whole layers' experts in host memory, the last layers first, as few as fit (`-ot
//      'blk\.(46|47)\.ffn_.*_exps=cpu'`, the way llama.cpp users write it), within the host budget.
// After steps 2-4 the context grows back to the largest that fits with them. The last lines give each
// device's total against its budget, with its parts. Uneven budgets give uneven
// --tensor-split shares (in proportion to the budgets) unless -ts is given. Each decision is one line,
// with why, handed to `say`; when nothing fits, the Failure names the totals of the smallest plan tried
// (the most every step can do) as the budget that would work. The search is deterministic: the same
// model, flags and budgets give the same plan.
//
// The compiler is a callback (compile one request into a plan), so the search needs no MLIR. Plans are
// compared only by rt::memoryAt, the function `tpc inspect`, the pictures and `--report` print from.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_COMPILER_FIT_H
#define TPC_TOOLS_TPC_COMPILER_FIT_H

#include "runtime/plan/PlanFormat.h"
#include "tools/tpc/ModelSource.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tpc::cli {

/// What --fit was given: one budget per device, and optionally the host's (0: not limited).
struct FitBudgets {
  std::vector<uint64_t> devices;
  uint64_t host = 0;
};

/// "24GiB", "512MiB", "1.5G", "2048M", "100000000" (bytes; K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
/// KB/MB/GB/TB powers of 1000). Throws Failure naming `flag` and the text.
uint64_t parseByteSize(const std::string &text, const std::string &flag);

/// Parses `--fit`: "B0,B1,...[,host=H]", or "auto" (the free memory of every visible CUDA device, read with
/// nvidia-smi; a Failure saying what to give instead where there is none). Throws Failure naming --fit.
FitBudgets parseFitBudgets(const std::string &spec);

/// The knobs of the search besides the budgets.
struct FitOptions {
  FitBudgets budgets;
  int64_t ctxStart = 0;         ///< 0: the model's training context
  int64_t ctxMin = 4096;        ///< the smallest context step 1 may choose (capped at the start)
  std::string kvLowest = "f16"; ///< --fit-kv: f16 (no KV step), q8_0 or q4_0
  bool moeSplitGiven = false;   ///< --moe-split was given: step 3 keeps it
  bool sharesGiven = false;     ///< --tensor-split was given: the budgets do not set the shares
};

/// The outcome: the request to compile and the context to write into the plan.
struct FitResult {
  CompileRequest request;
  int64_t ctx = 0;
  rt::Plan plan; ///< the chosen plan, compiled (its defaultCtx already set to ctx)
};

using FitCompile = std::function<rt::Plan(const CompileRequest &)>;

/// Runs the search from `base` (the user's flags). Throws Failure when nothing fits.
FitResult fitToBudgets(const CompileRequest &base, const FitOptions &options, const FitCompile &compile,
                       const std::function<void(const std::string &)> &say);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_COMPILER_FIT_H
