//===- ReaderTest.cpp - GGUF reader: getters, errors, robustness ------------===//
//
// Files are built with GGUFWriter (whose byte layout WriterTest checks independently) and read back.
// The robustness tests cut and corrupt a valid file at every byte and require a clean result or a
// one-line error, never a crash.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cstring>

using namespace tpc;
using namespace tpc::gguf;
using namespace tpc::gguf::test;

namespace {
/// A file with one key of each integer width, floats, strings and arrays, and two tensors.
std::vector<uint8_t> sampleFile() {
  GGUFWriter w;
  w.setString("general.architecture", "llama");
  w.setU8("k.u8", 200);
  w.setI8("k.i8", -5);
  w.setU16("k.u16", 60000);
  w.setI16("k.i16", -30000);
  w.setU32("k.u32", 4000000000u);
  w.setI32("k.i32", -7);
  w.setI32("k.i32pos", 7);
  w.setU64("k.u64", 1ull << 40);
  w.setI64("k.i64", -(1ll << 40));
  w.setF32("k.f32", 1e-5f);
  w.setF64("k.f64", 0.1);
  w.setBool("k.bool", true);
  w.setU32Array("k.u32s", {2, 2, 1});
  w.setI32Array("k.i32s", {1, -1});
  w.setF32Array("k.f32s", {0.5f, 1.5f});
  w.setBoolArray("k.bools", {true, false, true});
  w.setStringArray("k.strs", {"a", "", "ccc"});
  EXPECT_TRUE(w.addTensor("a", GGMLType::F32, {4, 2}));
  EXPECT_TRUE(w.addTensor("b", GGMLType::Q8_0, {64, 3}));
  Expected<std::vector<uint8_t>> bytes = w.writeToBuffer([](size_t, uint8_t *, size_t) {});
  EXPECT_TRUE(bytes) << bytes.message();
  return bytes.take();
}
} // namespace

TEST(GGUFReader, IntegerGettersAcceptAnyFittingType) {
  auto f = parseOrFail(sampleFile(), "s.gguf");
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->getU32("k.u8"), 200u);
  EXPECT_EQ(*f->getU32("k.u16"), 60000u);
  EXPECT_EQ(*f->getU32("k.u32"), 4000000000u);
  EXPECT_EQ(*f->getU32("k.i32pos"), 7u);
  EXPECT_EQ(*f->getU64("k.u64"), 1ull << 40);
  EXPECT_EQ(*f->getI64("k.i64"), -(1ll << 40));
  EXPECT_EQ(*f->getI64("k.i8"), -5);
  EXPECT_EQ(*f->getI64("k.i16"), -30000);
  EXPECT_EQ(*f->getI64("k.u32"), 4000000000ll);
  EXPECT_FLOAT_EQ(*f->getF32("k.f32"), 1e-5f);
  EXPECT_FLOAT_EQ(*f->getF32("k.f64"), 0.1f);
  EXPECT_TRUE(*f->getBool("k.bool"));
  EXPECT_EQ(*f->getString("general.architecture"), "llama");
}

TEST(GGUFReader, GetterErrorsNameFileKeyAndTypes) {
  auto f = parseOrFail(sampleFile(), "s.gguf");
  ASSERT_TRUE(f);
  Expected<uint32_t> missing = f->getU32("llama.block_count");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.message(), "s.gguf: metadata key 'llama.block_count' is missing");
  Expected<uint32_t> wrongType = f->getU32("general.architecture");
  ASSERT_FALSE(wrongType);
  EXPECT_EQ(wrongType.message(),
            "s.gguf: metadata key 'general.architecture' has type string, expected uint32");
  Expected<uint32_t> negative = f->getU32("k.i32");
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.message(), "s.gguf: metadata key 'k.i32' value -7 does not fit in uint32");
  EXPECT_FALSE(f->getU32("k.u64"));
  EXPECT_FALSE(f->getU64("k.i64"));
  EXPECT_FALSE(f->getF32("k.u32"));
  EXPECT_FALSE(f->getBool("k.u8"));
  EXPECT_FALSE(f->getString("k.strs"));
  Expected<std::vector<uint32_t>> notArray = f->getU32Array("k.u32");
  ASSERT_FALSE(notArray);
  EXPECT_NE(notArray.message().find("has type uint32, expected an array"), std::string::npos);
  Expected<std::vector<uint32_t>> negElem = f->getU32Array("k.i32s");
  ASSERT_FALSE(negElem);
  EXPECT_NE(negElem.message().find("element 1 value -1 does not fit in uint32"), std::string::npos);
}

TEST(GGUFReader, OrVariantsDefaultOnlyWhenAbsent) {
  auto f = parseOrFail(sampleFile());
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->getU32Or("absent", 17), 17u);
  EXPECT_EQ(*f->getU32Or("k.u8", 17), 200u);
  EXPECT_FALSE(f->getU32Or("general.architecture", 17)) << "wrong type is still an error";
  EXPECT_FLOAT_EQ(*f->getF32Or("absent", 2.5f), 2.5f);
  EXPECT_FALSE(f->getF32Or("k.strs", 2.5f));
  EXPECT_EQ(*f->getStringOr("absent", "x"), "x");
  EXPECT_EQ(*f->getBoolOr("absent", true), true);
  EXPECT_EQ(*f->getBoolOr("k.bool", false), true);
  EXPECT_EQ(*f->getU64Or("absent", 5), 5u);
  EXPECT_EQ(*f->getI64Or("k.i8", 5), -5);
}

TEST(GGUFReader, Arrays) {
  auto f = parseOrFail(sampleFile());
  ASSERT_TRUE(f);
  EXPECT_EQ(*f->getU32Array("k.u32s"), (std::vector<uint32_t>{2, 2, 1}));
  EXPECT_EQ(*f->getI64Array("k.i32s"), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(*f->getF32Array("k.f32s"), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(*f->getBoolArray("k.bools"), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(*f->getStringArray("k.strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->find("k.u32s")->toString(), "[2, 2, 1]");
  EXPECT_EQ(f->find("k.u32s")->toString(2), "[2, 2, ... (3 elements)]");
}

TEST(GGUFReader, MetadataInFileOrderAndTensorInfos) {
  auto f = parseOrFail(sampleFile());
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 18u);
  EXPECT_EQ(f->metadata()[0].key, "general.architecture");
  EXPECT_EQ(f->metadata()[17].key, "k.strs");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->dataOffset() % 32, 0u);
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo *b = f->findTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GGMLType::Q8_0);
  EXPECT_EQ(b->ne, (std::vector<uint64_t>{64, 3}));
  EXPECT_EQ(b->nelements, 192u);
  EXPECT_EQ(b->nbytes, 3u * 2 * 34);
  EXPECT_EQ(b->offset, 32u) << "a (32 bytes) then b at the next multiple of 32";
  EXPECT_EQ(b->fileOffset, f->dataOffset() + 32);
  EXPECT_EQ(f->tensorData(*b), f->data() + b->fileOffset);
  EXPECT_EQ(f->findTensor("c"), nullptr);
  EXPECT_EQ(describeShape(b->ne), "[64, 3]");
}

TEST(GGUFReader, OpenMapsFileAndNamesPath) {
  std::vector<uint8_t> bytes = sampleFile();
  std::string path = ::testing::TempDir() + "reader-open.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::open(path);
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->fileSize(), bytes.size());
  EXPECT_EQ(std::memcmp((*f)->data(), bytes.data(), bytes.size()), 0);
  Expected<std::unique_ptr<GGUFFile>> missing = GGUFFile::open(path + ".nope");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find(path + ".nope: cannot open: No such file"), std::string::npos);
  Expected<std::unique_ptr<GGUFFile>> dir = GGUFFile::open(::testing::TempDir());
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos);
}

TEST(GGUFReader, Version2IsRead) {
  std::vector<uint8_t> bytes = sampleFile();
  bytes[4] = 2;
  auto f = parseOrFail(bytes);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 2u);
}

/// Every prefix that cuts into the last tensor's data or earlier is an error, cutting only the final
/// padding is fine, and no prefix crashes.
TEST(GGUFReader, EveryTruncationIsAnError) {
  std::vector<uint8_t> bytes = sampleFile();
  auto full = parseOrFail(bytes);
  ASSERT_TRUE(full);
  const TensorInfo &last = full->tensors().back();
  size_t needed = last.fileOffset + last.nbytes;
  ASSERT_LT(needed, bytes.size()) << "the writer pads the data section to the alignment";
  for (size_t n = 0; n < bytes.size(); ++n) {
    Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::openBuffer(bytes.data(), n, "cut.gguf");
    if (n >= needed) {
      EXPECT_TRUE(f) << f.message();
      continue;
    }
    ASSERT_FALSE(f) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(f.message().rfind("cut.gguf: offset ", 0), 0u) << f.message();
    EXPECT_EQ(f.message().find('\n'), std::string::npos);
  }
}

/// Flipping any byte to a few hostile values never crashes; errors are single lines naming the file.
TEST(GGUFReader, CorruptedBytesNeverCrash) {
  std::vector<uint8_t> bytes = sampleFile();
  size_t errors = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    for (uint8_t v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::vector<uint8_t> c = bytes;
      c[i] = v;
      Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::openBuffer(c.data(), c.size(), "bad.gguf");
      if (!f) {
        ++errors;
        EXPECT_EQ(f.message().rfind("bad.gguf: ", 0), 0u) << f.message();
      }
    }
  EXPECT_GT(errors, 100u);
}
