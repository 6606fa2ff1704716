//===- KernelChoice.h - which kernel level a CPU session runs, and why -*- C++ -*-===//
//
// The first CPU session of a process fixes the process's kernel level (Quant.h activeIsa()) before any
// kernel runs, in this order:
//  1. TPC_CPU_ISA=<level>: that level ("override").
//  2. A CPU with one candidate level (calibrationCandidates(): AVX2 only, or no AVX2): that one ("cpuid").
//  3. TPC_CPU_CALIBRATE=0 (or off): CPUID's best level, as before calibration existed ("cpuid").
//  4. The cache file (KernelCache.h) holds an entry for this CPU model, kernel build and the plan's decode
//     shapes and thread count: its level ("cached"). TPC_CPU_CALIBRATE=force skips this step.
//  5. Else calibrate (Calibration.h) on a sample of the plan's decode step, with the session's real weights,
//     on one thread ("calibrated"), and write the cache entry.
// A cache file that cannot be read or parsed, or cannot be written, is a warning (KernelChoice::warnings),
// never an error: the calibration runs and the file is rewritten. Later sessions of the process get the
// first one's choice (the element-wise tables keep the level they were first built with), and a process
// that ran kernels before its first session (tests) keeps the level those kernels used ("fixed").
//
// One level for the whole step rather than a level per kernel class: the tables are nested (each level is
// the one below plus its own kernels: Kernels.h), a level is what TPC_CPU_ISA names and what every test
// runs, so a calibrated run gives the bits of `TPC_CPU_ISA=<chosen level>` (test/tools/cpu-calibrate.test
// holds it to that). Mixing per class would make a run's numerics a combination no test covers.
//
// Decode sample: every matmul and expert matmul of the device with one token (expert matmuls: as many
// experts as a token is routed to), at most kCalibrationBytes of weights: each shape class (type, rows,
// row length) keeps its share of the step's weight bytes, as whole matrices from layers spread over the
// model, or rows of a matrix larger than its share (Gemma 3's 262144 x 640 output projection), each piece
// weighted by the bytes it stands for. Attention layers at kCalibrationDepth positions of context.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_KERNELCHOICE_H
#define TPC_RUNTIME_CPU_KERNELCHOICE_H

#include "runtime/cpu/Calibration.h"
#include "runtime/cpu/KernelCache.h"
#include "runtime/plan/PlanFormat.h"

#include <functional>
#include <string>
#include <vector>

namespace tpc::rt::cpu {

/// Weight bytes the decode sample reads per level and round: many times a core's L2, so the weights stream
/// as in decode, and small enough for 5-9 rounds in the time budget on one core (64 MiB left bench-llama
/// Q3_K_M 4-6 rounds on the Sapphire Rapids VM); a plan with fewer weights is timed whole.
constexpr uint64_t kCalibrationBytes = 32ull << 20;
/// Context positions of the attention pieces (a chat turn's depth; capped by a sliding window and the
/// session's context).
constexpr int64_t kCalibrationDepth = 512;

/// TPC_CPU_CALIBRATE: 0/off, 1/on (the default), force.
enum class CalibrateMode { Off, Auto, Force };

/// What is wrong with `value` as TPC_CPU_CALIBRATE (null: unset), one line naming the variable and the
/// values; empty when fine.
std::string calibrateModeProblem(const char *value);
/// The mode `value` names (null or a bad value: Auto; bad values are refused at open by the problem above).
CalibrateMode calibrateMode(const char *value);

/// A level and how it was chosen.
struct KernelChoice {
  Isa isa = Isa::Scalar;
  std::string how;                   ///< "override", "cpuid", "cached", "calibrated" or "fixed"
  std::string detail;                ///< one clause: the variable, the measurements, the cache entry's note
  std::vector<std::string> warnings; ///< cache problems, each one line
  /// "avx512vnni (calibrated: ...)", what `tpc run --bench` prints.
  std::string line() const;
};

/// The inputs of decideKernels (steps 1-5 of the file comment), so tests can give their own.
struct KernelChoiceRequest {
  const char *isaOverride = nullptr; ///< TPC_CPU_ISA's value (valid; null: unset)
  CalibrateMode mode = CalibrateMode::Auto;
  std::vector<Isa> candidates; ///< calibrationCandidates()
  std::string cachePath;       ///< empty: no cache
  KernelCacheKey key;
  std::function<Calibration()> measure; ///< runs the calibration
};

/// Steps 1-5 of the file comment; the answer is always one of `candidates` or the override.
KernelChoice decideKernels(const KernelChoiceRequest &r);

/// The decode sample of device plan `dp` whose tensors are at `ptr` (the session's resolved addresses).
CalibrationWork decodeWork(const DevicePlan &dp, const std::vector<void *> &ptr, int64_t ctx,
                           uint64_t budgetBytes = kCalibrationBytes);

/// The shapes part of the cache key: a hash of `w`'s shapes, not its addresses (calibrate() runs one thread,
/// so the session's thread count is no part of it).
std::string shapeKey(const CalibrationWork &w);

/// The first CPU session's choice (see the file comment), fixing activeIsa(); later calls return it.
KernelChoice chooseSessionKernels(const DevicePlan &dp, const std::vector<void *> &ptr, int64_t ctx);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_KERNELCHOICE_H
