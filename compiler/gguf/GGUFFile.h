//===- GGUFFile.h - GGUF model file reader ------------------------*- C++ -*-===//
//
// Reads a GGUF file (version 2 or 3, little-endian) into typed metadata and tensor infos, and maps the file
// so tensor data can be read in place. The file is untrusted: every count, length, dimension, offset and
// size is checked against the file size with overflow-safe arithmetic before it is used, and every
// failure is one line naming the file, the byte offset and the field:
//   model.gguf: offset 8: tensor_count: 4000000000 tensors cannot fit in a 1024-byte file
//
// File layout (all integers little-endian; the same in v2 and v3; v1 used 32-bit counts and is refused):
//
//   header
//     uint32  magic                "GGUF" (bytes 47 47 55 46)
//     uint32  version              2 or 3
//     uint64  tensor_count         number of tensor infos
//     uint64  metadata_kv_count    number of metadata key/value pairs
//   metadata_kv_count x key/value
//     string  key                  ("general.architecture"; unique)
//     uint32  value_type           see ValueType
//     ...     value
//   tensor_count x tensor info
//     string  name                 (unique; 1..63 bytes, ggml's GGML_MAX_NAME is 64)
//     uint32  n_dims               1..4 (GGML_MAX_DIMS)
//     uint64  ne[n_dims]           dimensions in ggml order, innermost (contiguous) first; each >= 1
//     uint32  type                 ggml type id (runtime/ggml/GGMLTypes.h)
//     uint64  offset               of the tensor's data, relative to the data section; a multiple of
//                                  the alignment
//   padding to a multiple of the alignment
//   data section                   tensor data; ne[0] is a whole number of quant blocks and a tensor
//                                  occupies ne[0]/block_elems*block_bytes*ne[1]*ne[2]*ne[3] bytes
//
//   string  = uint64 length, then that many bytes (UTF-8, no terminator)
//   value   = uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64 | int64 | float32 | float64
//           | bool (one byte, 0 or 1) | string
//           | array: uint32 element type, uint64 count, count elements (arrays may nest: an element of
//             type array is again element type + count + elements)
//
// `general.alignment` (an unsigned integer, a power of two that fits in uint32; default 32) sets the
// alignment.
//
// Beyond what ggml's own reader checks, tpc refuses: empty tensor names, n_dims 0, a dimension of 0 (ggml
// accepts it, but no model has an empty tensor and importers divide by dimensions), bool bytes other than
// 0/1, nested arrays deeper than kMaxArrayDepth, and overlapping tensor data. ggml additionally requires
// tensors to be packed in order; tpc only requires them aligned, in bounds and disjoint.
//
// Usage:
//   Expected<std::unique_ptr<GGUFFile>> f = GGUFFile::open("model.gguf");
//   if (!f) { report(f.message()); return; }
//   Expected<uint32_t> layers = (*f)->getU32("llama.block_count");
//   const TensorInfo *t = (*f)->findTensor("token_embd.weight");
//   const uint8_t *bytes = (*f)->tensorData(*t);   // t->nbytes bytes, valid while the file lives
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_GGUF_GGUFFILE_H
#define TPC_COMPILER_GGUF_GGUFFILE_H

#include "runtime/support/Expected.h"
#include "runtime/ggml/GGMLTypes.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tpc::gguf {

using tpc::Error;
using tpc::Expected;

/// Metadata value type ids as written in the file.
enum class ValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

/// The GGUF type name ("uint32", "string", ...), or "unknown" for an id outside the table.
const char *valueTypeName(ValueType t);
/// True for the eight integer types.
bool isIntegerType(ValueType t);
/// Bytes one scalar of this type occupies (0 for string and array).
size_t scalarSize(ValueType t);

/// Maximum nesting of arrays inside arrays (an array of scalars has depth 1).
constexpr unsigned kMaxArrayDepth = 8;
/// ggml's GGML_MAX_DIMS.
constexpr unsigned kMaxDims = 4;
/// ggml's GGML_MAX_NAME: tensor names are shorter than this.
constexpr size_t kMaxTensorName = 64;
/// The data alignment when `general.alignment` is absent.
constexpr uint64_t kDefaultAlignment = 32;

/// One metadata value: a scalar, a string, or an array (element type + elements, which may be arrays).
class Value {
public:
  Value() = default;
  /// Scalars; the stored type is the one named.
  static Value u8(uint8_t v) { return fromBits(ValueType::UInt8, v); }
  static Value i8(int8_t v) { return fromBits(ValueType::Int8, static_cast<uint64_t>(int64_t(v))); }
  static Value u16(uint16_t v) { return fromBits(ValueType::UInt16, v); }
  static Value i16(int16_t v) { return fromBits(ValueType::Int16, static_cast<uint64_t>(int64_t(v))); }
  static Value u32(uint32_t v) { return fromBits(ValueType::UInt32, v); }
  static Value i32(int32_t v) { return fromBits(ValueType::Int32, static_cast<uint64_t>(int64_t(v))); }
  static Value u64(uint64_t v) { return fromBits(ValueType::UInt64, v); }
  static Value i64(int64_t v) { return fromBits(ValueType::Int64, static_cast<uint64_t>(v)); }
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v) { return fromBits(ValueType::Bool, v ? 1 : 0); }
  static Value string(std::string v);
  /// An array; every element must have type `elemType` (checked by the writer).
  static Value array(ValueType elemType, std::vector<Value> elems);

  ValueType type() const { return type_; }
  bool isInteger() const { return isIntegerType(type_); }
  bool isArray() const { return type_ == ValueType::Array; }

  /// The integer value, for integer types (sign-extended for signed ones).
  bool isSigned() const;
  uint64_t asUnsigned() const { return bits_; }
  int64_t asSigned() const { return static_cast<int64_t>(bits_); }
  /// The value of a float32/float64 (as double).
  double asFloat() const;
  bool asBool() const { return bits_ != 0; }
  const std::string &asString() const { return str_; }

  /// Element type and elements of an array.
  ValueType elemType() const { return elemType_; }
  const std::vector<Value> &elems() const { return elems_; }

  /// A short rendering for messages and `tpc inspect` ("4", "1e-05", "\"llama\"", "[2, 2, 1]", arrays
  /// longer than `maxElems` end in ", ... (N elements)").
  std::string toString(size_t maxElems = 16) const;

  /// Same type, same bits (floats compare bitwise, so NaN == NaN), same elements.
  bool operator==(const Value &o) const;
  bool operator!=(const Value &o) const { return !(*this == o); }

private:
  static Value fromBits(ValueType t, uint64_t bits) {
    Value v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
  }
  ValueType type_ = ValueType::UInt8;
  ValueType elemType_ = ValueType::UInt8;
  uint64_t bits_ = 0; ///< integers (sign-extended), bools, float bits (float32 stored as float32 bits)
  std::string str_;
  std::vector<Value> elems_;
};

/// A metadata entry, in file order.
struct Metadata {
  std::string key;
  Value value;
};

/// One tensor info, validated: type known, dims in range, data aligned and inside the file.
struct TensorInfo {
  std::string name;
  GGMLType type = GGMLType::F32;
  std::vector<uint64_t> ne; ///< ggml order, innermost first; 1..4 entries, each >= 1
  uint64_t offset = 0;      ///< relative to the data section
  uint64_t fileOffset = 0;  ///< absolute offset in the file
  uint64_t nbytes = 0;
  uint64_t nelements = 0;
};

/// "[256, 512, 8]": a shape in ggml ne order.
std::string describeShape(const std::vector<uint64_t> &ne);

/// `s` (a name or string from the file) safe to quote in a one-line message: control bytes become \n,
/// \t, \r or \xNN, a backslash \\; other bytes (UTF-8 included) stay. Longer than `maxBytes`: the start
/// and "... (N bytes)".
std::string printable(std::string_view s, size_t maxBytes = 200);

/// A parsed, validated GGUF file with its bytes (mapped from disk, or a private copy for openBuffer).
class GGUFFile {
public:
  /// Maps and parses `path`. Errors name the path.
  static Expected<std::unique_ptr<GGUFFile>> open(const std::string &path);
  /// Parses a copy of `size` bytes at `data`; `name` stands for the file name in errors.
  static Expected<std::unique_ptr<GGUFFile>> openBuffer(const uint8_t *data, size_t size, std::string name);
  ~GGUFFile();
  GGUFFile(const GGUFFile &) = delete;
  GGUFFile &operator=(const GGUFFile &) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  /// Absolute offset of the data section (end of the tensor infos, rounded up to the alignment).
  uint64_t dataOffset() const { return dataOffset_; }
  uint64_t fileSize() const { return size_; }
  /// The path (or buffer name) used in error messages.
  const std::string &path() const { return path_; }
  /// The whole file.
  const uint8_t *data() const { return data_; }

  /// Metadata entries in file order.
  const std::vector<Metadata> &metadata() const { return metadata_; }
  /// The value of `key`, or nullptr.
  const Value *find(std::string_view key) const;

  /// Typed getters. Integer getters accept any integer type whose value fits; float getters accept
  /// float32 and float64. Errors: "<file>: metadata key 'k' is missing", "... has type string, expected
  /// uint32", "... value -1 does not fit in uint32".
  Expected<uint32_t> getU32(std::string_view key) const;
  Expected<uint64_t> getU64(std::string_view key) const;
  Expected<int64_t> getI64(std::string_view key) const;
  Expected<float> getF32(std::string_view key) const;
  Expected<bool> getBool(std::string_view key) const;
  Expected<std::string> getString(std::string_view key) const;
  Expected<std::vector<uint32_t>> getU32Array(std::string_view key) const;
  Expected<std::vector<int64_t>> getI64Array(std::string_view key) const;
  Expected<std::vector<float>> getF32Array(std::string_view key) const;
  Expected<std::vector<bool>> getBoolArray(std::string_view key) const;
  Expected<std::vector<std::string>> getStringArray(std::string_view key) const;

  /// Like the getters, but return `def` when the key is absent (a present key of the wrong type is
  /// still an error).
  Expected<uint32_t> getU32Or(std::string_view key, uint32_t def) const;
  Expected<uint64_t> getU64Or(std::string_view key, uint64_t def) const;
  Expected<int64_t> getI64Or(std::string_view key, int64_t def) const;
  Expected<float> getF32Or(std::string_view key, float def) const;
  Expected<bool> getBoolOr(std::string_view key, bool def) const;
  Expected<std::string> getStringOr(std::string_view key, std::string def) const;

  /// Tensor infos in file order.
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  /// The tensor named `name`, or nullptr.
  const TensorInfo *findTensor(std::string_view name) const;
  /// Pointer to the tensor's nbytes bytes inside the mapping (valid while this object lives).
  const uint8_t *tensorData(const TensorInfo &t) const { return data_ + t.fileOffset; }

private:
  GGUFFile() = default;
  friend class Parser;
  static Expected<std::unique_ptr<GGUFFile>> parse(std::unique_ptr<GGUFFile> file);
  Error keyError(std::string_view key, const std::string &what) const;
  Expected<const Value *> require(std::string_view key) const;

  std::string path_;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
  void *mapping_ = nullptr;     ///< mmap'ed region (open), or null
  std::vector<uint8_t> buffer_; ///< private copy (openBuffer)
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t dataOffset_ = 0;
  std::vector<Metadata> metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> metadataIndex_;
  std::unordered_map<std::string_view, size_t> tensorIndex_;
};

} // namespace tpc::gguf

#endif // TPC_COMPILER_GGUF_GGUFFILE_H
