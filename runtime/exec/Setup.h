//===- Setup.h - what every backend's open does the same way ------*- C++ -*-===//
//
// A backend's open() is: prepareOpen (every check that needs no memory, in a fixed order, so every backend
// refuses a plan with the same one-line error), then its own capacity check with arenaBytes, one allocation
// per arena, copyWeightSlice for each weight slice from the WeightSource, and resolveTensors (Binding.h).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_SETUP_H
#define TPC_RUNTIME_EXEC_SETUP_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpc::rt::exec {

/// The bytes a session copies weight slices from (the pieces' file offsets index them): SessionOptions::
/// ggufData, or the plan's GGUF, checked against the plan and mapped read-only until the last copy of
/// `mapping` goes.
struct WeightSource {
  const uint8_t *data = nullptr;
  std::shared_ptr<const void> mapping; ///< set when `data` is the read-only file mapping made here
};
Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts);

/// What prepareOpen decided.
struct OpenPlan {
  int64_t ctx = 0;          ///< KV positions (SessionOptions::ctxSize or the plan's default)
  std::vector<int> devices; ///< the plan devices this session runs, ascending
  WeightSource weights;
};

/// The checks every backend makes before allocating, in this order: the plan is valid (validatePlan), the
/// context size is sane, SessionOptions::devices name distinct plan devices and a subset comes with a
/// communicator whose world is the plan's devices and which serves them, the weights' source is the GGUF
/// the plan was compiled from, device 0 has the logits, every step of the session's devices fits its op for
/// 1 and max_batch tokens, and the collectives of all devices agree. The error is one line.
Expected<OpenPlan> prepareOpen(const Plan &plan, const SessionOptions &opts);

/// One device's arenas at a context size.
struct ArenaBytes {
  uint64_t weights = 0, acts = 0, hostActs = 0, kv = 0;
  uint64_t total = 0; ///< the sum
};
/// The arena sizes of device plan `dp` for `ctx` positions; an error naming device `d` on overflow.
Expected<ArenaBytes> arenaBytes(const DevicePlan &dp, size_t d, int64_t ctx);
/// SessionOptions::maxDeviceBytes: "" when `b` fits `capacity` (0: no limit), else one line naming the
/// device, its bytes and what to do.
std::string checkDeviceCapacity(size_t d, const ArenaBytes &b, int64_t ctx, uint64_t capacity);

/// Copies weight slice `w` from `gguf` (the bytes its pieces' file offsets index) to `dst`, which holds
/// w.bytes: the pieces in order, rows in order, packed.
void copyWeightSlice(const WeightSlice &w, const uint8_t *gguf, uint8_t *dst);

/// Drops the pages of `src`'s file mapping that weight slice `w` was copied from (MADV_DONTNEED; a page
/// read again comes back from the page cache), so that the mapping does not add the file's touched pages to
/// the process's peak RSS on top of the arenas they were copied into: a rank of a multi-process run reads
/// rows strided over most of the file, which otherwise stays resident until open returns. Nothing when
/// `src` is caller's memory (SessionOptions::ggufData).
void releaseWeightSlice(const WeightSource &src, const WeightSlice &w);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_SETUP_H
