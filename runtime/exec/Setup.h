//===- Setup.h - what every backend's open does the same way ------*- C++ -*-===//
//
// A backend's open() is: prepareOpen (every check that needs no memory, in a fixed order, so every backend
// refuses a plan with the same one-line error), then its own capacity check with arenaBytes, one allocation
// per arena, copyWeightSlice for each weight slice from the WeightSource (or, on a host backend, the slice
// read in place where weightInPlace allows), and resolveTensors (Binding.h).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_SETUP_H
#define TPC_RUNTIME_EXEC_SETUP_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpc::rt::exec {

/// The bytes a session reads weight slices from (the pieces' file offsets index them): SessionOptions::
/// ggufData, or the plan's GGUF, checked against the plan and mapped read-only until the last copy of
/// `mapping` goes.
struct WeightSource {
  const uint8_t *data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<const void> mapping; ///< null for SessionOptions::ggufData (read only during open)
  /// The mapped file, open for reading, while the source lives (-1 without a mapping): a contiguous piece
  /// is copied with pread, which costs no page faults on the mapping and nothing to release after.
  std::shared_ptr<const int> file;
};
Expected<WeightSource> openWeightSource(const Plan &plan, const SessionOptions &opts);

/// Sets `comm`'s all-reduce payload to SessionOptions::commDtype, else the plan's; an error naming the
/// communicator and what to do where it cannot move that payload. Call before the first collective.
Expected<void> setCommPayload(const Plan &plan, const SessionOptions &opts, comm::Communicator &comm);

/// Where weight slice `w` can be read in place: its pieces are one contiguous run of a mapped GGUF (a
/// mirrored weight, or a split along its outer axis), starting 4-byte aligned like a slice in a weight
/// arena. A host backend then reads the page cache directly instead of copying (the copy doubled the
/// weights' memory and took most of open). Null when the slice must be copied (a split along the rows'
/// reduction axis takes a part of every row), is empty, or `src` is not a mapping.
const uint8_t *weightInPlace(const WeightSlice &w, const WeightSource &src);

/// After the copies: drops the mapping's pages that lie wholly inside the spans of copied slice `w`'s
/// pieces from the process (MADV_DONTNEED; the file's page cache keeps them), so that copied weights do not
/// count twice in its memory. Harmless when another slice reads such a page in place: the mapping is
/// private and never written, so a later access maps the same file page again.
void releaseCopiedPages(const WeightSlice &w, const WeightSource &src);

/// Rows [r0, r1) of piece `pc` to dst (where row r0 goes), as copyWeightSlice copies them, dropping the source
/// pages as it goes. A contiguous run is read with pread when `src` has its file (no page of the mapping is
/// faulted, so none is left to release). Strided rows go through the mapping in groups spanning at most 1 MiB
/// of the file, and after each group every page it touched, and the pages the kernel mapped around its faults
/// (other devices' rows interleaved with these), leave the process (MADV_DONTNEED; a page another slice reads
/// maps again from the page cache): a slice split along the rows' reduction axis, or one expert's rows of each
/// expert, reads rows strided over its whole tensor, and released only per slice, the pages mapped around the
/// faults made a 2-rank bench-qwen3moe peak ~30 MiB of the other rank's weights above its own. Plain copies
/// when `src` is not a mapping. Threads may copy disjoint row ranges of one piece at once (open spreads a
/// large slice over its threads this way).
void copyWeightRowsReleasing(const WeightPiece &pc, uint64_t r0, uint64_t r1, const WeightSource &src,
                             uint8_t *dst);

/// After the copies: drops every page of the mapping that no span in `keep` (file offsets [first, second):
/// the slices the session reads in place) touches, so that what the open read besides them (a neighbour's
/// rows the kernel mapped around a fault, a copied slice's partial edge pages) leaves the process: a rank
/// then holds only its own weights' pages of a GGUF every rank maps whole. Returns the bytes advised.
uint64_t releasePagesOutside(std::vector<std::pair<uint64_t, uint64_t>> keep, const WeightSource &src);

/// What prepareOpen decided.
struct OpenPlan {
  int64_t ctx = 0;          ///< KV positions per sequence (SessionOptions::ctxSize or the plan's default)
  int32_t sequences = 1;    ///< sequences the KV caches hold (SessionOptions::sequences)
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
/// The arena sizes of device plan `dp` for `ctx` positions per sequence, `sequences` sequences and calls
/// of at most `maxBatch` tokens (the rings of sliding-window caches); an error naming device `d` on
/// overflow.
Expected<ArenaBytes> arenaBytes(const DevicePlan &dp, size_t d, int64_t ctx, int32_t sequences,
                                int64_t maxBatch);
/// SessionOptions::maxDeviceBytes: "" when `b` fits `capacity` (0: no limit), else one line naming the
/// device, its bytes and what to do.
std::string checkDeviceCapacity(size_t d, const ArenaBytes &b, int64_t ctx, uint64_t capacity);

/// Where cache i of a device's KV arena lies: K at kOffset, V at vOffset (bytes from the arena's start),
/// `positions` per sequence (kvPositions). Every backend carves its one KV allocation this way; the sum of
/// the caches is ArenaBytes::kv.
struct KvPlacement {
  uint64_t kOffset = 0, vOffset = 0;
  int64_t positions = 0;
};
std::vector<KvPlacement> kvLayout(const DevicePlan &dp, int64_t ctx, int32_t sequences, int64_t maxBatch);

/// Copies weight slice `w` from `gguf` (the bytes its pieces' file offsets index) to `dst`, which holds
/// w.bytes: the pieces in order, rows in order, packed.
void copyWeightSlice(const WeightSlice &w, const uint8_t *gguf, uint8_t *dst);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_SETUP_H
