//===- IQGrids.cpp - the lattice grids of the IQ2 / IQ3 / IQ1 formats ------===//
//
// The CPU's grid tables (BlocksIQ.h), expanded at compile time from the code tables of IQGridCodes.h (the
// CUDA backend expands the same codes into its device tables); the layout tests check the expanded grids
// against hashes of ggml's tables.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/BlocksIQ.h"
#include "runtime/ggml/IQGridCodes.h"

#include <cstddef>

namespace tpc {
namespace {

/// The grid of `codes`: W values of `Bits`-bit level indices per entry, element j in byte j.
template <typename Word, int W, int Bits, size_t N>
constexpr std::array<Word, N> expand(const uint16_t (&codes)[N], const uint8_t *levels) {
  std::array<Word, N> out{};
  for (size_t i = 0; i < N; ++i)
    out[i] = iqgrid::expandEntry<Word, W, Bits>(codes, levels, i);
  return out;
}

} // namespace

using namespace iqgrid;

// External linkage from the declarations in BlocksIQ.h.
constexpr std::array<uint64_t, 256> kIQ2XXSGrid = expand<uint64_t, 8, 2>(kIQ2XXSCodes, kIQ2Levels);
constexpr std::array<uint64_t, 512> kIQ2XSGrid = expand<uint64_t, 8, 2>(kIQ2XSCodes, kIQ2Levels);
constexpr std::array<uint64_t, 1024> kIQ2SGrid = expand<uint64_t, 8, 2>(kIQ2SCodes, kIQ2Levels);
constexpr std::array<uint32_t, 256> kIQ3XXSGrid = expand<uint32_t, 4, 3>(kIQ3XXSCodes, kIQ3XXSLevels);
constexpr std::array<uint32_t, 512> kIQ3SGrid = expand<uint32_t, 4, 3>(kIQ3SCodes, kIQ3SLevels);
constexpr std::array<uint64_t, 2048> kIQ1SGrid = expand<uint64_t, 8, 2>(kIQ1SCodes, kIQ1Levels);

} // namespace tpc
