//===- GGUFMutator.cpp - structure-aware mutation of GGUF models ------------===//
//
// One mutation per call, chosen at random with weights that favour the hyperparameters (the `<arch>.*`
// keys) and tensor shapes, the inputs whose bad values used to crash the importer. Values are drawn from
// boundary sets (0, 1, -1, powers of two, type limits, NaN, infinities, the old value nudged), so a few
// mutations reach any check in readHParams and the op verifiers.
//===----------------------------------------------------------------------===//
#include "test/fuzz/GGUFMutator.h"

#include "compiler/gguf/GGUFFile.h"
#include "compiler/gguf/GGUFWriter.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tpc::fuzz {
namespace {

using gguf::Metadata;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;

/// The hyperparameter keys the importers read (after `<arch>.`), for the "add a key" mutation.
const char *const kHParamKeys[] = {
    "block_count", "embedding_length", "feed_forward_length", "context_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count", "expert_count",
    "expert_used_count", "expert_feed_forward_length", "attention.sliding_window", "final_logit_softcapping",
    "attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa", "rope.freq_base_swa"};
const char *const kArchNames[] = {"llama", "qwen3", "qwen3moe", "gemma3", "gemma4", "mamba", ""};

struct Rng {
  std::mt19937_64 g;
  uint64_t below(uint64_t n) { return n ? g() % n : 0; }
  bool oneIn(uint64_t n) { return below(n) == 0; }
};

int64_t interestingInt(Rng &r, int64_t old) {
  static const int64_t kValues[] = {0,     1,     2,     3,         4,         7,         8,
                                    16,    31,    32,    64,        128,       255,       256,
                                    1024,  4096,  65535, 65536,     1 << 24,   INT32_MAX, int64_t(UINT32_MAX),
                                    -1,    -2,    -256,  INT32_MIN, INT64_MAX, INT64_MIN};
  switch (r.below(7)) {
  case 0:
    return old + 1;
  case 1:
    return old - 1;
  case 2:
    return old * 2;
  case 3:
    return old / 2;
  case 4:
    return static_cast<int64_t>(r.g());
  default:
    return kValues[r.below(std::size(kValues))];
  }
}

double interestingFloat(Rng &r, double old) {
  static const double kValues[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, -1.0, 1.0, 1e-30, 1e30, 1e-6,
                                   0.5, FLT_MAX, FLT_MIN, 1e-45, 10000.0, 1e6};
  switch (r.below(5)) {
  case 0:
    return old * 2;
  case 1:
    return old / 2;
  case 2:
    return -old;
  default:
    return kValues[r.below(std::size(kValues))];
  }
}

/// An integer value of type `t` (wrapping to the type's width).
Value intOfType(ValueType t, int64_t v) {
  switch (t) {
  case ValueType::UInt8:
    return Value::u8(static_cast<uint8_t>(v));
  case ValueType::Int8:
    return Value::i8(static_cast<int8_t>(v));
  case ValueType::UInt16:
    return Value::u16(static_cast<uint16_t>(v));
  case ValueType::Int16:
    return Value::i16(static_cast<int16_t>(v));
  case ValueType::UInt32:
    return Value::u32(static_cast<uint32_t>(v));
  case ValueType::Int32:
    return Value::i32(static_cast<int32_t>(v));
  case ValueType::UInt64:
    return Value::u64(static_cast<uint64_t>(v));
  default:
    return Value::i64(v);
  }
}

const ValueType kIntTypes[] = {ValueType::UInt8,  ValueType::Int8,   ValueType::UInt16, ValueType::Int16,
                               ValueType::UInt32, ValueType::Int32,  ValueType::UInt64, ValueType::Int64};

Value mutateValue(Rng &r, const Value &v, int depth = 0) {
  if (v.isInteger()) {
    if (r.oneIn(8)) // another type of the same value: the getters must convert or refuse it by name
      return r.oneIn(2) ? intOfType(kIntTypes[r.below(8)], v.asSigned())
                        : Value::f32(static_cast<float>(v.asSigned()));
    return intOfType(v.type(), interestingInt(r, v.asSigned()));
  }
  switch (v.type()) {
  case ValueType::Float32:
    if (r.oneIn(8)) { // the same number as an integer (a converted NaN or out-of-range value is 0)
      double d = v.asFloat();
      return Value::u32(d >= 0 && d < 4294967296.0 ? static_cast<uint32_t>(d) : 0);
    }
    return Value::f32(static_cast<float>(interestingFloat(r, v.asFloat())));
  case ValueType::Float64:
    return Value::f64(interestingFloat(r, v.asFloat()));
  case ValueType::Bool:
    return r.oneIn(4) ? Value::u8(2) : Value::boolean(!v.asBool());
  case ValueType::String: {
    if (r.oneIn(2))
      return Value::string(kArchNames[r.below(std::size(kArchNames))]);
    std::string s = v.asString();
    if (!s.empty() && r.oneIn(2))
      s.resize(r.below(s.size()));
    else
      s += static_cast<char>(r.below(256));
    return Value::string(s);
  }
  case ValueType::Array: {
    std::vector<Value> e = v.elems();
    uint64_t op = r.below(5);
    if (e.empty() || op == 0) { // grow by a copy of an element (or a zero)
      e.push_back(e.empty() ? intOfType(ValueType::UInt32, 0) : e[r.below(e.size())]);
      if (!e.empty() && e.back().type() != v.elemType())
        return Value::array(e.back().type(), {e.back()});
    } else if (op == 1) {
      e.erase(e.begin() + r.below(e.size()));
    } else if (op == 2) {
      e.clear();
    } else if (depth < 2) { // one element changes, keeping the array's element type
      size_t i = r.below(e.size());
      Value m = mutateValue(r, e[i], depth + 1);
      if (m.type() == v.elemType())
        e[i] = m;
    }
    return Value::array(v.elemType(), std::move(e));
  }
  default:
    return v;
  }
}

/// A new value for an added hyperparameter key.
Value freshValue(Rng &r) {
  switch (r.below(3)) {
  case 0:
    return Value::f32(float(interestingFloat(r, 1.0)));
  case 1:
    return Value::i32(static_cast<int32_t>(interestingInt(r, 8)));
  default:
    return Value::u32(static_cast<uint32_t>(interestingInt(r, 8)));
  }
}

void mutateMetadata(Rng &r, std::vector<Metadata> &md, const std::string &arch) {
  if (md.empty() || r.oneIn(8)) { // add (or overwrite) a hyperparameter the importers read
    std::string key = arch + "." + kHParamKeys[r.below(std::size(kHParamKeys))];
    for (Metadata &m : md)
      if (m.key == key) {
        m.value = freshValue(r);
        return;
      }
    md.push_back({key, freshValue(r)});
    return;
  }
  // Mostly the model's own hyperparameters; the rest (tokenizer, general.*) less often.
  std::vector<size_t> hparams;
  for (size_t i = 0; i < md.size(); ++i)
    if (md[i].key.rfind(arch + ".", 0) == 0)
      hparams.push_back(i);
  size_t i = !hparams.empty() && !r.oneIn(4) ? hparams[r.below(hparams.size())] : r.below(md.size());
  if (md[i].key == "general.alignment")
    return; // the writer lays the file out by its own alignment
  if (r.oneIn(10))
    md.erase(md.begin() + i);
  else
    md[i].value = mutateValue(r, md[i].value);
}

void mutateTensors(Rng &r, std::vector<TensorInfo> &ts) {
  if (ts.empty())
    return;
  TensorInfo &t = ts[r.below(ts.size())];
  switch (r.below(8)) {
  case 0: // another ggml type (the writer refuses one whose block does not divide ne[0])
    t.type = static_cast<GGMLType>(r.below(40));
    return;
  case 1:
    ts.erase(ts.begin() + (&t - ts.data()));
    return;
  case 2: // one more or one fewer dimension
    if (t.ne.size() > 1 && r.oneIn(2))
      t.ne.pop_back();
    else if (t.ne.size() < gguf::kMaxDims)
      t.ne.push_back(1 + r.below(4));
    return;
  case 3: // swap names with another tensor
    std::swap(t.name, ts[r.below(ts.size())].name);
    return;
  default: { // one dimension: a neighbour, a multiple or fraction, a block boundary
    uint64_t &d = t.ne[r.below(t.ne.size())];
    static const int64_t kDeltas[] = {1, -1, 32, -32, 256, -256};
    switch (r.below(4)) {
    case 0:
      d = d * 2;
      break;
    case 1:
      d = std::max<uint64_t>(d / 2, 1);
      break;
    case 2:
      d = 1 + r.below(8);
      break;
    default:
      d = static_cast<uint64_t>(std::max<int64_t>(1, int64_t(d) + kDeltas[r.below(std::size(kDeltas))]));
    }
  }
  }
}

/// Stores every float matrix whose rows are whole q4_0 blocks as q4_0: the model keeps its shapes and
/// compiles the same way, in a fraction of the bytes (the f32 fixtures are up to 23 MB; smaller inputs run
/// faster and keep the corpus small).
void compact(std::vector<TensorInfo> &ts) {
  for (TensorInfo &t : ts)
    if (t.ne.size() >= 2 && t.ne[0] % 32 == 0 &&
        (t.type == GGMLType::F32 || t.type == GGMLType::F16 || t.type == GGMLType::BF16))
      t.type = GGMLType::Q4_0;
}

} // namespace

size_t mutateGGUF(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  Expected<std::unique_ptr<gguf::GGUFFile>> f = gguf::GGUFFile::openBuffer(data, size, "mutate");
  if (!f)
    return 0;
  Rng r{std::mt19937_64(seed)};
  std::vector<Metadata> md = (*f)->metadata();
  std::vector<TensorInfo> ts = (*f)->tensors();
  Expected<std::string> archKey = (*f)->getStringOr("general.architecture", "llama");
  std::string arch = archKey ? *archKey : "llama";
  if (size > (4u << 20)) // hashing and copying 20 MB inputs would cost libFuzzer more than compiling them
    compact(ts);
  // Several changes at once now and then, so that two checks can fail together.
  for (uint64_t n = 1 + (r.oneIn(4) ? r.below(3) : 0); n > 0; --n) {
    if (r.below(10) < 7)
      mutateMetadata(r, md, arch);
    else
      mutateTensors(r, ts);
  }
  gguf::GGUFWriter w;
  if (!w.setAlignment((*f)->alignment()))
    return 0;
  for (Metadata &m : md)
    w.set(m.key, std::move(m.value));
  for (const TensorInfo &t : ts)
    if (!w.addTensor(t.name, t.type, t.ne))
      return 0;
  Expected<std::vector<uint8_t>> out = w.writeToBuffer([](size_t, uint8_t *, size_t) {}); // zeros
  if (!out || out->size() > maxSize)
    return 0;
  std::memcpy(data, out->data(), out->size());
  return out->size();
}

} // namespace tpc::fuzz
