//===- GGUFMutator.h - structure-aware mutation of GGUF models -----*- C++ -*-===//
//
// Byte-level mutation of a model file almost never gets past the GGUF reader, so the compile-path fuzz
// target mutates what the importer reads: the file is decoded with GGUFFile, one thing changes (a
// metadata value, often a hyperparameter, to a boundary value, NaN/inf, another type, another length;
// a key removed or a known hyperparameter key added; a tensor dimension, type or name; a tensor
// removed) and the file is written again with GGUFWriter. Tensor bytes are written as zeros: compiling
// never reads them, and this keeps a changed shape consistent with the data size. Models over 4 MB are
// stored compactly as well (float matrices as q4_0: same shapes, a fraction of the bytes).
//
//   size_t n = tpc::fuzz::mutateGGUF(data, size, maxSize, seed);   // 0: not a GGUF, or not writable
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_FUZZ_GGUFMUTATOR_H
#define TPC_TEST_FUZZ_GGUFMUTATOR_H

#include <cstddef>
#include <cstdint>

namespace tpc::fuzz {

/// Mutates the GGUF file in `data` (`size` bytes, room for `maxSize`) in place; returns the new size, or 0
/// when `data` does not parse or the mutated file cannot be written or does not fit (the caller then
/// mutates bytes instead). Deterministic in `seed`.
size_t mutateGGUF(uint8_t *data, size_t size, size_t maxSize, unsigned seed);

} // namespace tpc::fuzz

#endif // TPC_TEST_FUZZ_GGUFMUTATOR_H
