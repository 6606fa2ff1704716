//===- WriterTest.cpp - GGUFWriter layout and round trips -------------------===//
//
// The first test checks the writer's bytes against a layout computed by hand from the format; the
// others write files with every value type, nested arrays, two alignments and a multi-threaded fill, and
// read them back.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

using namespace tpc;
using namespace tpc::gguf;
using namespace tpc::gguf::test;

namespace {
template <typename T> T load(const std::vector<uint8_t> &b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}
} // namespace

TEST(GGUFWriter, BytesMatchTheFormat) {
  GGUFWriter w;
  w.setU32("n", 7);
  ASSERT_TRUE(w.addTensor("t", GGMLType::F16, {3}));
  Expected<std::vector<uint8_t>> b = w.writeToBuffer([](size_t i, uint8_t *dst, size_t n) {
    EXPECT_EQ(i, 0u);
    EXPECT_EQ(n, 6u);
    std::memset(dst, 0xab, n);
  });
  ASSERT_TRUE(b) << b.message();
  // header 24 | key: 8 + 1, type 4, u32 4 -> 41 | tensor: 8 + 1, n_dims 4, ne 8, type 4, offset 8 -> 74
  // | pad to 96 | data 6 bytes | pad to 128.
  ASSERT_EQ(b->size(), 128u);
  EXPECT_EQ(std::memcmp(b->data(), "GGUF", 4), 0);
  EXPECT_EQ(load<uint32_t>(*b, 4), 3u);
  EXPECT_EQ(load<uint64_t>(*b, 8), 1u);
  EXPECT_EQ(load<uint64_t>(*b, 16), 1u);
  EXPECT_EQ(load<uint64_t>(*b, 24), 1u);
  EXPECT_EQ((*b)[32], 'n');
  EXPECT_EQ(load<uint32_t>(*b, 33), 4u);
  EXPECT_EQ(load<uint32_t>(*b, 37), 7u);
  EXPECT_EQ(load<uint64_t>(*b, 41), 1u);
  EXPECT_EQ((*b)[49], 't');
  EXPECT_EQ(load<uint32_t>(*b, 50), 1u);
  EXPECT_EQ(load<uint64_t>(*b, 54), 3u);
  EXPECT_EQ(load<uint32_t>(*b, 62), 1u);
  EXPECT_EQ(load<uint64_t>(*b, 66), 0u);
  for (size_t i = 74; i < 96; ++i)
    EXPECT_EQ((*b)[i], 0) << i;
  for (size_t i = 96; i < 102; ++i)
    EXPECT_EQ((*b)[i], 0xab) << i;
  for (size_t i = 102; i < 128; ++i)
    EXPECT_EQ((*b)[i], 0) << i;
}

TEST(GGUFWriter, EveryValueTypeRoundTrips) {
  GGUFWriter w;
  w.setU8("u8", 255);
  w.setI8("i8", -128);
  w.setU16("u16", 65535);
  w.setI16("i16", -32768);
  w.setU32("u32", 0xffffffffu);
  w.setI32("i32", INT32_MIN);
  w.setU64("u64", UINT64_MAX);
  w.setI64("i64", INT64_MIN);
  w.setF32("f32", -0.25f);
  w.setF64("f64", 1e300);
  w.setBool("bool", false);
  w.setString("str", std::string("nul\0inside", 10));
  w.setArray("i16s", ValueType::Int16, {Value::i16(-1), Value::i16(2)});
  w.setArray("f64s", ValueType::Float64, {Value::f64(0.5)});
  w.setArray("empty", ValueType::String, {});
  w.setStringArray("strs", {"x", "yy"});
  auto f = parseOrFail(*w.writeToBuffer(nullptr));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->find("u8")->type(), ValueType::UInt8);
  EXPECT_EQ(f->find("u8")->asUnsigned(), 255u);
  EXPECT_EQ(f->find("i8")->type(), ValueType::Int8);
  EXPECT_EQ(f->find("i8")->asSigned(), -128);
  EXPECT_EQ(f->find("u16")->asUnsigned(), 65535u);
  EXPECT_EQ(f->find("i16")->asSigned(), -32768);
  EXPECT_EQ(f->find("u32")->asUnsigned(), 0xffffffffu);
  EXPECT_EQ(f->find("i32")->asSigned(), INT32_MIN);
  EXPECT_EQ(*f->getU64("u64"), UINT64_MAX);
  EXPECT_EQ(*f->getI64("i64"), INT64_MIN);
  EXPECT_EQ(f->find("f32")->type(), ValueType::Float32);
  EXPECT_EQ(*f->getF32("f32"), -0.25f);
  EXPECT_EQ(f->find("f64")->type(), ValueType::Float64);
  EXPECT_EQ(f->find("f64")->asFloat(), 1e300);
  EXPECT_EQ(*f->getBool("bool"), false);
  EXPECT_EQ(*f->getString("str"), std::string("nul\0inside", 10));
  EXPECT_EQ(f->find("i16s")->elemType(), ValueType::Int16);
  EXPECT_EQ(*f->getI64Array("i16s"), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(f->find("f64s")->elems()[0].asFloat(), 0.5);
  EXPECT_TRUE(f->getStringArray("empty")->empty());
  EXPECT_EQ(*f->getStringArray("strs"), (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(f->metadata().size(), 16u);
}

TEST(GGUFWriter, NestedArraysRoundTripUpToTheDepthLimit) {
  Value v = Value::array(ValueType::UInt32, {Value::u32(1), Value::u32(2)});
  for (unsigned d = 1; d < kMaxArrayDepth; ++d)
    v = Value::array(ValueType::Array, {v, Value::array(ValueType::UInt32, {})});
  GGUFWriter w;
  w.set("deep", v);
  w.set("mixed", Value::array(ValueType::Array, {Value::array(ValueType::String, {Value::string("s")}),
                                                 Value::array(ValueType::Float32, {Value::f32(2)})}));
  auto f = parseOrFail(*w.writeToBuffer(nullptr));
  ASSERT_TRUE(f);
  const Value *r = f->find("deep");
  unsigned depth = 0;
  while (r->isArray() && r->elemType() == ValueType::Array) {
    ASSERT_EQ(r->elems().size(), 2u);
    EXPECT_TRUE(r->elems()[1].elems().empty());
    r = &r->elems()[0];
    ++depth;
  }
  EXPECT_EQ(depth + 1, kMaxArrayDepth);
  EXPECT_EQ(r->toString(), "[1, 2]");
  EXPECT_EQ(f->find("mixed")->toString(), "[[\"s\"], [2]]");

  GGUFWriter tooDeep;
  tooDeep.set("deep", Value::array(ValueType::Array, {v}));
  Expected<std::vector<uint8_t>> b = tooDeep.writeToBuffer(nullptr);
  ASSERT_FALSE(b);
  EXPECT_NE(b.message().find("metadata 'deep'"), std::string::npos);
  GGUFWriter mismatch;
  mismatch.set("m", Value::array(ValueType::UInt32, {Value::u8(1)}));
  EXPECT_FALSE(mismatch.writeToBuffer(nullptr));
}

TEST(GGUFWriter, SettingAKeyTwiceKeepsItsPosition) {
  GGUFWriter w;
  w.setU32("a", 1);
  w.setU32("b", 2);
  w.setString("a", "again");
  auto f = parseOrFail(*w.writeToBuffer(nullptr));
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(*f->getString("a"), "again");
}

class GGUFWriterAlignment : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GGUFWriterAlignment, TensorsAlignedAndDataRoundTrips) {
  uint64_t align = GetParam();
  GGUFWriter w;
  ASSERT_TRUE(w.setAlignment(align));
  w.setString("general.architecture", "test");
  ASSERT_TRUE(w.addTensor("f32", GGMLType::F32, {3, 5}));
  ASSERT_TRUE(w.addTensor("q4k", GGMLType::Q4_K, {256, 2, 3}));
  ASSERT_TRUE(w.addTensor("i8", GGMLType::I8, {7}));
  ASSERT_TRUE(w.addTensor("q80", GGMLType::Q8_0, {32, 1, 1, 2}));
  auto fill = [](size_t i, uint8_t *dst, size_t n) {
    for (size_t k = 0; k < n; ++k)
      dst[k] = static_cast<uint8_t>(i * 31 + k);
  };
  auto f = parseOrFail(*w.writeToBuffer(fill));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->alignment(), align);
  EXPECT_EQ(f->find("general.alignment") != nullptr, align != 32) << "32 is the default and is not written";
  EXPECT_EQ(f->dataOffset() % align, 0u);
  ASSERT_EQ(f->tensors().size(), 4u);
  const uint64_t bytes[] = {60, 2 * 3 * 144, 7, 2 * 34};
  for (size_t i = 0; i < 4; ++i) {
    const TensorInfo &t = f->tensors()[i];
    EXPECT_EQ(t.offset % align, 0u) << t.name;
    EXPECT_EQ(t.nbytes, bytes[i]) << t.name;
    const uint8_t *d = f->tensorData(t);
    for (size_t k = 0; k < t.nbytes; ++k)
      ASSERT_EQ(d[k], static_cast<uint8_t>(i * 31 + k)) << t.name << " byte " << k;
  }
  EXPECT_EQ(f->tensors()[3].ne, (std::vector<uint64_t>{32, 1, 1, 2}));
}

INSTANTIATE_TEST_SUITE_P(Alignments, GGUFWriterAlignment, ::testing::Values(32, 64, 4096));

TEST(GGUFWriter, MultiThreadedFillToFile) {
  constexpr size_t kTensors = 64;
  constexpr unsigned kThreads = 8;
  GGUFWriter w;
  w.setString("general.architecture", "test");
  for (size_t i = 0; i < kTensors; ++i)
    ASSERT_TRUE(w.addTensor("t" + std::to_string(i), GGMLType::F32, {16 + i, 3}));
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<size_t> calls{0};
  auto fill = [&](size_t i, uint8_t *dst, size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(1)); // let every worker take some tensors
    float *p = reinterpret_cast<float *>(dst);
    for (size_t k = 0; k < n / 4; ++k)
      p[k] = static_cast<float>(i * 1000 + k);
  };
  std::string path = ::testing::TempDir() + "writer-mt.gguf";
  Expected<void> ok = w.write(path, fill, kThreads);
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_EQ(calls.load(), kTensors);
  EXPECT_GT(threads.size(), 1u) << "fills ran on more than one thread";
  EXPECT_LE(threads.size(), kThreads);
  Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::open(path);
  ASSERT_TRUE(f) << f.message();
  ASSERT_EQ((*f)->tensors().size(), kTensors);
  for (size_t i = 0; i < kTensors; ++i) {
    const TensorInfo &t = (*f)->tensors()[i];
    ASSERT_EQ(t.ne[0], 16 + i);
    const float *p = reinterpret_cast<const float *>((*f)->tensorData(t));
    for (size_t k = 0; k < t.nelements; ++k)
      ASSERT_EQ(p[k], static_cast<float>(i * 1000 + k)) << t.name;
  }
  std::ifstream tmp(path + ".tmp");
  EXPECT_FALSE(tmp) << "the temporary file was renamed";
}

TEST(GGUFWriter, BadInputIsRefusedWithNamedErrors) {
  GGUFWriter w;
  Expected<size_t> q = w.addTensor("blk.0.attn_q.weight", GGMLType::Q4_K, {100, 2});
  ASSERT_FALSE(q);
  EXPECT_NE(q.message().find("tensor 'blk.0.attn_q.weight': ne[0] = 100 is not a whole number of q4_K blocks"),
            std::string::npos)
      << q.message();
  EXPECT_FALSE(w.addTensor("z", GGMLType::F32, {0}));
  EXPECT_FALSE(w.addTensor("five", GGMLType::F32, {1, 1, 1, 1, 1}));
  EXPECT_FALSE(w.addTensor("none", GGMLType::F32, {}));
  EXPECT_FALSE(w.addTensor(std::string(64, 'x'), GGMLType::F32, {1}));
  EXPECT_FALSE(w.addTensor("huge", GGMLType::F32, {1ull << 62, 4}));
  EXPECT_FALSE(w.addTensor("unknown", static_cast<GGMLType>(4), {1}));
  ASSERT_TRUE(w.addTensor("a", GGMLType::F32, {1}));
  EXPECT_FALSE(w.addTensor("a", GGMLType::F32, {1}));
  EXPECT_FALSE(w.setAlignment(0));
  EXPECT_FALSE(w.setAlignment(48));
  Expected<void> bad = w.write("/nonexistent-dir/x.gguf", nullptr);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("/nonexistent-dir/x.gguf.tmp: cannot create"), std::string::npos) << bad.message();
}
