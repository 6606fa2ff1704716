//===- Calibration.h - time the kernel levels on a plan's decode work -*- C++ -*-===//
//
// CPUID says which kernel levels (Quant.h: avx2, avx512, avx512vnni) a CPU can run, not which is fastest:
// AMD Zen 4 runs 512-bit instructions as two 256-bit halves, and there the AVX2 table decodes faster than
// the AVX-512 VNNI one CPUID would pick (issue 36). calibrate() times each candidate level on a sample of one
// decode step's kernels (the caller builds it from the plan: KernelChoice.h) and pickIsa() names the
// fastest. The caller caches the answer per CPU model, build and shape set, so a machine pays once.
//
// What is timed, per level: every matmul piece with one token (the activation row quantized as decode
// quantizes it, then the row / lane kernels over the piece's weight rows) and every attention piece as one
// decode token over a synthetic f16 / quantized cache of the piece's depth. A piece stands for `weight`
// times its own time in the step (a sample of a large matrix's rows, one of several layers of the same
// shape), so a level's estimate is sum(weight x time). The element-wise kernels (norms, GLU, RoPE) are not
// timed: a few percent of a decode step, and their table follows the level.
//
// Noise: the pieces run on the calling thread alone and are timed in its CPU time (CLOCK_THREAD_CPUTIME_ID),
// so time the core spent on other processes does not count: on the shared 2-core build VM (load average
// 10-13) wall-clock estimates of the same level varied 2x between runs, a machine that busy has no quiet
// round to find. The levels run in interleaved rounds (each round times every level, the order rotating),
// and each piece keeps its fastest time over the rounds: other processes only ever add time (cache misses
// after they ran), and interleaving spreads a slow phase (a frequency change) over all levels. Rounds stop
// after `budgetSeconds` of wall time (at least kMinCalibrationRounds of them). One thread measures a core's
// speed at each level, which is what separates the levels (Zen 4's split 512-bit units, VNNI's byte dots);
// with every core streaming, decode approaches the memory's bound and the levels come closer, which the
// margin of pickIsa() leaves to CPUID.
//
// Usage:
//   CalibrationWork w;  w.matmuls.push_back({weights, GGMLType::Q4_K, rows, k, rowStride, 1.0});
//   Calibration c = calibrate(w, calibrationCandidates());
//   Isa isa = c.chosen;   // c.times: the estimate per level, seconds per decode step's timed kernels
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_CALIBRATION_H
#define TPC_RUNTIME_CPU_CALIBRATION_H

#include "runtime/cpu/ThreadGroup.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/GGMLTypes.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tpc::rt::cpu {

/// A weight's rows, timed as one decode matmul (m = 1).
struct CalibMatmul {
  const void *w = nullptr;       ///< the first row
  GGMLType type = GGMLType::F32; ///< its type
  int64_t n = 0, k = 0;          ///< rows timed, row length
  size_t stride = 0;             ///< bytes between rows
  double weight = 1;             ///< how many times this piece's time counts in the step
};

/// An attention layer's shape, timed as one decode token at `depth` positions of context.
struct CalibAttention {
  int64_t hq = 0, hkv = 0, dk = 0, dv = 0;
  GGMLType typeK = GGMLType::F16, typeV = GGMLType::F16;
  int64_t depth = 0;
  float softcap = 0;
  double weight = 1; ///< how many layers of this shape the step runs
};

/// The sample of a decode step that calibrate() times.
struct CalibrationWork {
  std::vector<CalibMatmul> matmuls;
  std::vector<CalibAttention> attention;
};

/// A level's estimate: seconds of the timed kernels per decode step.
struct LevelTime {
  Isa isa = Isa::Scalar;
  double seconds = 0;
};

/// What calibrate() found.
struct Calibration {
  std::vector<LevelTime> times; ///< per candidate, in the candidates' order
  Isa chosen = Isa::Scalar;     ///< pickIsa(times)
  int rounds = 0;               ///< interleaved rounds run
  double wallSeconds = 0;       ///< the whole calibration, buffers included
};

/// Fewest rounds calibrate() runs, whatever the budget (the fastest of 3 is already robust to one slow one).
constexpr int kMinCalibrationRounds = 3;
/// Most rounds.
constexpr int kMaxCalibrationRounds = 9;
/// A level must beat CPUID's best by more than this fraction to replace it: within it the measurement
/// cannot tell the levels apart (avx2 and avx512 share their row kernels, so on decode they differ by
/// attention alone; on the Sapphire Rapids VM, loaded, the three levels' estimates of one plan moved by up
/// to 4 % between runs: docs/performance.md), and the best level is the one every earlier measurement of
/// tpc was made with. Zen 4's reported gap (AVX2 9 % faster than AVX-512 VNNI, issue 36) is beyond it.
constexpr double kCalibrationMargin = 0.05;

/// The levels worth timing on this CPU, in increasing order: every available one from avx2 up. The scalar
/// table, the portable reference, is several times slower wherever AVX2 exists and is a candidate only on a
/// CPU without it.
std::vector<Isa> calibrationCandidates();

/// The level to run: the fastest of `times`, unless `cpuid` (which must be among them) is within
/// kCalibrationMargin of it; only ever a level in `times`. `cpuid` absent from `times`: the fastest.
Isa pickIsa(const std::vector<LevelTime> &times, Isa cpuid);

/// Times `work` at each of `candidates` (each must be available) on the calling thread (see the file
/// comment) and picks with pickIsa(.., bestAvailableIsa()). An empty work or a single candidate times nothing
/// (rounds = 0) and picks the last candidate (they are in increasing order: the best).
Calibration calibrate(const CalibrationWork &work, const std::vector<Isa> &candidates,
                      double budgetSeconds = 0.4);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_CALIBRATION_H
