//===- FuzzGGUF.cpp - libFuzzer target for the GGUF reader ------------------===//
//
// Parses the input with GGUFFile::openBuffer and, when it parses, calls every accessor on every key and
// tensor and reads every tensor's bytes, so ASan sees any read outside the buffer and UBSan any overflow.
// Invariants that must hold for an accepted file are checked with __builtin_trap (a crash for the
// fuzzer): tensors lie inside the file, are aligned, and their sizes match the type table. An accepted
// file is also written again with GGUFWriter and read back: the writer must accept everything the reader
// accepts, and the round trip must reproduce every metadata value and tensor byte.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "compiler/gguf/GGUFWriter.h"
#include "test/fuzz/FuzzCheck.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

using namespace tpc;
using namespace tpc::gguf;

namespace {

volatile uint64_t gSink;

void touch(const Value &v) {
  gSink = gSink + v.asUnsigned() + v.asString().size();
  if (v.isArray())
    for (const Value &e : v.elems())
      touch(e);
  (void)v.toString();
}

/// Every typed getter on `key`; the results are discarded, only crashes matter.
void allGetters(const GGUFFile &f, const std::string &key) {
  (void)f.getU32(key);
  (void)f.getU64(key);
  (void)f.getI64(key);
  (void)f.getF32(key);
  (void)f.getBool(key);
  (void)f.getString(key);
  (void)f.getU32Array(key);
  (void)f.getI64Array(key);
  (void)f.getF32Array(key);
  (void)f.getBoolArray(key);
  (void)f.getStringArray(key);
  (void)f.getU32Or(key, 1);
  (void)f.getU64Or(key, 1);
  (void)f.getI64Or(key, 1);
  (void)f.getF32Or(key, 1);
  (void)f.getBoolOr(key, true);
  (void)f.getStringOr(key, "x");
}
/// Writes `f` again and checks the copy reads back identical.
void roundTrip(const GGUFFile &f) {
  GGUFWriter w;
  FUZZ_CHECK(w.setAlignment(f.alignment()));
  for (const Metadata &m : f.metadata())
    w.set(m.key, m.value);
  for (const TensorInfo &t : f.tensors())
    FUZZ_CHECK(w.addTensor(t.name, t.type, t.ne));
  Expected<std::vector<uint8_t>> bytes = w.writeToBuffer([&](size_t i, uint8_t *dst, size_t n) {
    FUZZ_CHECK(n == f.tensors()[i].nbytes);
    std::memcpy(dst, f.tensorData(f.tensors()[i]), n);
  });
  FUZZ_CHECK(bytes);
  Expected<std::unique_ptr<GGUFFile>> g = GGUFFile::openBuffer(bytes->data(), bytes->size(), "copy.gguf");
  FUZZ_CHECK(g);
  FUZZ_CHECK((*g)->alignment() == f.alignment());
  FUZZ_CHECK((*g)->metadata().size() == f.metadata().size());
  // Bit for bit: Value::operator== compares float bits, so a NaN (signalling ones included) must come back
  // with its exact payload.
  for (const Metadata &m : f.metadata())
    FUZZ_CHECK((*g)->find(m.key) && *(*g)->find(m.key) == m.value);
  FUZZ_CHECK((*g)->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorInfo &a = f.tensors()[i], &b = (*g)->tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes);
    FUZZ_CHECK(std::memcmp(f.tensorData(a), (*g)->tensorData(b), a.nbytes) == 0);
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Expected<std::unique_ptr<GGUFFile>> r = GGUFFile::openBuffer(data, size, "fuzz.gguf");
  if (!r) {
    FUZZ_CHECK(!r.message().empty());
    // One line, naming the file.
    FUZZ_CHECK(r.message().find('\n') == std::string::npos && r.message().find("fuzz.gguf") == 0);
    return 0;
  }
  const GGUFFile &f = **r;
  FUZZ_CHECK(f.version() == 2 || f.version() == 3);
  FUZZ_CHECK(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  FUZZ_CHECK(f.dataOffset() <= f.fileSize());
  for (const Metadata &m : f.metadata()) {
    FUZZ_CHECK(f.find(m.key) != nullptr);
    touch(m.value);
    allGetters(f, m.key);
  }
  allGetters(f, "general.architecture.absent");
  for (const TensorInfo &t : f.tensors()) {
    FUZZ_CHECK(f.findTensor(t.name) != nullptr);
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= kMaxDims);
    FUZZ_CHECK(t.offset % f.alignment() == 0);
    FUZZ_CHECK(t.fileOffset == f.dataOffset() + t.offset);
    FUZZ_CHECK(t.fileOffset <= f.fileSize() && t.nbytes <= f.fileSize() - t.fileOffset);
    std::optional<uint64_t> row = ggmlRowBytes(t.type, t.ne[0]);
    FUZZ_CHECK(row && *row * (t.nelements / t.ne[0]) == t.nbytes);
    const uint8_t *p = f.tensorData(t);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i)
      sum += p[i];
    gSink = gSink + sum;
    (void)describeShape(t.ne);
  }
  // Bounded so one huge (but valid) input does not dominate the run.
  if (f.fileSize() <= (1u << 20))
    roundTrip(f);
  return 0;
}
