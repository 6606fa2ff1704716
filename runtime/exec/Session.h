//===- Executor.h - run a device plan on the CPU backend ----------*- C++ -*-===//
//
// A Session owns everything one loaded plan needs: per device one weight, one activation and one KV
// allocation (no allocation while running), the weights copied from the GGUF (mmapped) piece by piece,
// and a ThreadGroup per device. evaluate() binds the tokens and positions, runs every device's step list
// as a flat loop (devices on their own threads, meeting at collectives; every other step through
// exec::runLocalStep) and returns the logits rows of device 0. Prompts longer than the plan's max_batch run
// in chunks. Host placement changes nothing here: all of a CPU "device" is host memory.
//
// Opening checks, in order: the GGUF is the one the plan was compiled from (size + fingerprint), each
// device's arenas fit the memory the user allows, every step's operands fit its op for 1 and max_batch
// tokens, and the collectives of all devices agree in shape. Errors are one line naming what is wrong.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_EXECUTOR_H
#define TPC_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/plan/PlanIO.h"

#include <memory>
#include <string>
#include <vector>

namespace tpc::rt {

/// How to open a plan.
struct SessionOptions {
  int threads = 0;      ///< total worker threads, split across devices (0: hardware concurrency)
  int64_t ctxSize = 0;  ///< KV cache positions (0: the plan's default context)
  std::string ggufPath; ///< overrides the plan's GGUF path
  /// Weights from memory instead of the GGUF file (tests): the bytes the pieces' file offsets index.
  const uint8_t *ggufData = nullptr;
  uint64_t ggufDataSize = 0;
  uint64_t maxDeviceBytes = 0; ///< capacity per device (0: no limit); opening fails naming the device
};

/// The bytes a session copies weight slices from (the pieces' file offsets index them): SessionOptions::
/// ggufData, or the plan's GGUF, checked against the plan and mapped read-only until the last copy of
/// `mapping` goes.
struct WeightSource {
  const uint8_t *data = nullptr;
  std::shared_ptr<const void> mapping;
};
Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts);

/// The checks every backend's evaluate() makes before running: as many positions as tokens (at least one),
/// token ids inside the vocabulary, positions inside the context of `ctx` tokens. Empty when fine, else one
/// line naming the problem and what to do.
std::string checkEvaluateArgs(const Plan &plan, int64_t ctx, const std::vector<int32_t> &tokens,
                              const std::vector<int32_t> &positions);

/// Time spent per step name, filled when profiling is on.
struct StepProfile {
  std::string name;
  OpKind op = OpKind::Copy;
  double seconds = 0;
  int64_t calls = 0;
};

/// A loaded, runnable plan. One caller at a time: evaluate() itself runs the devices in parallel.
class Session {
public:
  /// Opens `plan` (see the file comment for the checks); the error is one line.
  static Expected<std::unique_ptr<Session>> open(Plan plan, const SessionOptions &opts);
  ~Session();

  /// Runs tokens[i] at positions[i] (positions < ctxSize()) and returns tokens.size() rows of n_vocab
  /// logits, row-major. Errors (bad token id, position past the context, size mismatch) are one line.
  Expected<std::vector<float>> evaluate(const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &positions);

  const Plan &plan() const;
  int64_t ctxSize() const;
  int64_t nVocab() const;
  /// Threads per device actually used.
  int threadsPerDevice() const;
  /// Bytes allocated per device (weights + activations + KV).
  std::vector<uint64_t> deviceBytes() const;
  /// Tensor `id` of `device` after the last evaluate() call with `tokens` tokens, as floats (i32 and f16
  /// converted): for tests and debugging dumps. Empty when the id is out of range or a weight.
  std::vector<float> tensorData(size_t device, int32_t id, int64_t tokens) const;
  /// Turns per-step timing on (device 0's steps) and returns what was measured so far.
  void setProfiling(bool on);
  std::vector<StepProfile> profile() const;

private:
  Session();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_EXEC_EXECUTOR_H
