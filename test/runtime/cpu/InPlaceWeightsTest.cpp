//===- InPlaceWeightsTest.cpp - weight slices read from the mapped GGUF ----===//
//
// A CPU session reads a weight slice that is one contiguous run of the GGUF straight from the mapped file
// (exec::weightInPlace) and copies the others (a split along the rows' reduction axis). These tests check
// which slices qualify, that a 2-device plan with both kinds gives the logits of the all-copied session
// (--no-mmap, and weights from memory) bit for bit, and that the in-place slices take no arena bytes.
//===----------------------------------------------------------------------===//
#include "test/runtime/exec/ExecTestUtil.h"

#include "runtime/cpu/HostArena.h"
#include "runtime/exec/Setup.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/StepParams.h"

#include <cstdio>
#include <filesystem>
#include <unistd.h>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::test;

namespace {

/// A mapped source of `n` bytes at a page-aligned address (weightInPlace looks only at the pointers).
exec::WeightSource mappedSource(std::vector<uint8_t> &bytes) {
  exec::WeightSource src;
  src.data = bytes.data();
  src.size = bytes.size();
  src.mapping = std::shared_ptr<const void>(bytes.data(), [](const void *) {});
  return src;
}

WeightSlice slice(std::vector<WeightPiece> pieces) {
  WeightSlice w;
  w.name = "w";
  for (const WeightPiece &p : pieces)
    w.bytes += p.rows * p.rowBytes;
  w.pieces = std::move(pieces);
  return w;
}

TEST(InPlaceWeights, OnlyContiguousAlignedRunsOfAMappingQualify) {
  std::vector<uint8_t> bytes(4096);
  exec::WeightSource src = mappedSource(bytes);
  // Whole rows (a mirrored weight, or rows 2..5 of an outer-axis split): in place, at the first row.
  EXPECT_EQ(exec::weightInPlace(slice({{64, 32, 32, 4}}), src), bytes.data() + 64);
  // Two pieces that continue each other (segments of a merged tensor that end up adjacent): in place.
  EXPECT_EQ(exec::weightInPlace(slice({{128, 16, 16, 2}, {160, 8, 8, 4}}), src), bytes.data() + 128);
  // A part of every row (a split along the reduction axis): strided, copied.
  EXPECT_EQ(exec::weightInPlace(slice({{64, 32, 16, 4}}), src), nullptr);
  // A gap between pieces, a misaligned start, a run past the source, an empty slice: copied.
  EXPECT_EQ(exec::weightInPlace(slice({{128, 16, 16, 2}, {168, 8, 8, 4}}), src), nullptr);
  EXPECT_EQ(exec::weightInPlace(slice({{66, 32, 32, 1}}), src), nullptr);
  EXPECT_EQ(exec::weightInPlace(slice({{4000, 32, 32, 4}}), src), nullptr);
  EXPECT_EQ(exec::weightInPlace(slice({}), src), nullptr);
  // Weights from memory (SessionOptions::ggufData) are read only during open: never in place.
  exec::WeightSource memory = src;
  memory.mapping.reset();
  EXPECT_EQ(exec::weightInPlace(slice({{64, 32, 32, 4}}), memory), nullptr);
}

constexpr int64_t kE = 16, kF = 12, kV = 10, kRows = 7;

/// logits = W2 · gather(W1 · emb[tok]) over 2 devices, the full W1 [F,E] and W2 [V,F] stored once in the
/// fake GGUF: device d reads W1's rows of its share of F (one contiguous run: in place) and W2's columns of
/// it (a part of every row: copied); the embedding table is mirrored (in place on both devices).
PlanMaker mixedPlan() {
  const std::vector<int64_t> share = {7, 5};
  const std::vector<float> emb = randomFloats(kRows * kE, 1), w1 = randomFloats(kF * kE, 2),
                           w2 = randomFloats(kV * kF, 3);
  PlanMaker mk(2, 4, kV);
  const uint64_t w1At = mk.addBytes(w1.data(), w1.size() * 4), w2At = mk.addBytes(w2.data(), w2.size() * 4);
  int64_t f0 = 0;
  for (int d = 0; d < 2; ++d) {
    const int64_t f = share[d];
    const int32_t x = mk.tokenInput(d, {kE}, emb);
    const int32_t h = mk.act(d, {-1, f}), g = mk.act(d, {-1, kF}), p = mk.act(d, {-1, kV}), mine = mk.act(d, {-1, f});
    const uint64_t row1 = kE * 4;
    const int32_t w1d = mk.weightPieces(d, GGMLType::F32, {f, kE}, {{w1At + f0 * row1, row1, row1, uint64_t(f)}});
    const int32_t w2d = mk.weightPieces(d, GGMLType::F32, {kV, f}, {{w2At + f0 * 4, kF * 4, uint64_t(f) * 4, kV}});
    mk.b(d).step(OpKind::Matmul, {x, w1d}, {h}, {}, {}, "up");
    mk.b(d).step(OpKind::AllGather, {h}, {g}, AxisParams{1}.pack().ints, {}, "gather");
    mk.b(d).step(OpKind::Slice, {g}, {mine}, NarrowParams{1, f0, f}.pack().ints, {}, "mine");
    mk.b(d).step(OpKind::Matmul, {mine, w2d}, {p}, {}, {}, "down");
    mk.b(d).step(OpKind::AllReduce, {p}, {p}, {}, {}, "sum");
    if (d == 0)
      mk.b(d).step(OpKind::Copy, {p}, {mk.logits[0]}, {}, {}, "logits");
    f0 += f;
  }
  return mk;
}

/// The maker's bytes as a file the plan names (so the session maps it), removed at the end of the test.
struct GgufFile {
  std::string path;
  explicit GgufFile(PlanMaker &mk) {
    path = (std::filesystem::temp_directory_path() / ("tpc-inplace-" + std::to_string(::getpid()) + ".bin")).string();
    FILE *f = std::fopen(path.c_str(), "wb");
    EXPECT_TRUE(f && std::fwrite(mk.gguf.data(), 1, mk.gguf.size(), f) == mk.gguf.size());
    if (f)
      std::fclose(f);
    mk.plan.ggufPath = path;
    mk.plan.ggufSize = mk.gguf.size();
    auto fp = ggufFingerprint(path);
    EXPECT_TRUE(fp) << fp.message();
    mk.plan.ggufFingerprint = fp ? *fp : 0;
  }
  ~GgufFile() { std::remove(path.c_str()); }
};

TEST(InPlaceWeights, MappedSlicesGiveTheCopiedLogitsBitForBit) {
  PlanMaker mk = mixedPlan();
  GgufFile file(mk);
  const std::vector<int32_t> ids = {3, 1, 6, 0, 2, 5}, pos = {0, 1, 2, 3, 4, 5}; // two chunks of max_batch 4
  auto run = [&](SessionOptions o, std::vector<uint64_t> &bytes) {
    auto s = Session::open(mk.plan, o);
    EXPECT_TRUE(s) << (s ? "" : s.message());
    if (!s)
      return std::vector<float>();
    bytes = (*s)->deviceBytes();
    auto r = (*s)->evaluate(ids, pos);
    EXPECT_TRUE(r) << (r ? "" : r.message());
    return r ? *r : std::vector<float>();
  };
  SessionOptions mapped = mk.options(4, 16);
  mapped.ggufData = nullptr; // read the file the plan names
  mapped.ggufDataSize = 0;
  mapped.hugePages = false; // huge pages copy every slice
  SessionOptions copied = mapped;
  copied.weightsInPlace = false;
  SessionOptions huge = mapped;
  huge.hugePages = true;
  std::vector<uint64_t> mappedBytes, copiedBytes, memoryBytes, hugeBytes;
  const std::vector<float> a = run(mapped, mappedBytes), b = run(copied, copiedBytes),
                           c = run(mk.options(4, 16), memoryBytes), d = run(huge, hugeBytes);
  ASSERT_EQ(a.size(), ids.size() * kV);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), a.size());
  ASSERT_EQ(d.size(), a.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "in place vs --no-mmap";
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "in place vs weights from memory";
  EXPECT_EQ(std::memcmp(a.data(), d.data(), a.size() * 4), 0) << "in place vs copied onto huge pages";
  // On huge pages (where the kernel has them) nothing is read in place: the copied session's arena bytes.
  EXPECT_EQ(hugeBytes, cpu::hugePagesUsable() ? copiedBytes : mappedBytes);
  // Per device the embedding (7 x 16 floats) and its W1 rows are read in place, 64-byte aligned in the
  // plan's packing; only W2's columns take arena bytes.
  ASSERT_EQ(mappedBytes.size(), 2u);
  const uint64_t embBytes = (kRows * kE * 4 + 63) / 64 * 64;
  EXPECT_EQ(copiedBytes[0] - mappedBytes[0], embBytes + (7 * kE * 4 + 63) / 64 * 64);
  EXPECT_EQ(copiedBytes[1] - mappedBytes[1], embBytes + (5 * kE * 4 + 63) / 64 * 64);
  EXPECT_EQ(copiedBytes, memoryBytes);
}

} // namespace
