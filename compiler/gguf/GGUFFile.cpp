//===- GGUFFile.cpp - GGUF model file reader --------------------------------===//
//
// Parses the layout documented in GGUFFile.h. The parser reads through a cursor that never moves past
// the end of the bytes: each read first checks how many bytes are left, and every count is compared with
// the bytes left before anything is allocated for it, so a hostile file cannot make the reader allocate
// more than a small multiple of its own size. Errors stop the parse at the first problem.
//
// Assumes a little-endian host (x86-64, aarch64), like ggml.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tpc::gguf {

const char *valueTypeName(ValueType t) {
  switch (t) {
  case ValueType::UInt8:
    return "uint8";
  case ValueType::Int8:
    return "int8";
  case ValueType::UInt16:
    return "uint16";
  case ValueType::Int16:
    return "int16";
  case ValueType::UInt32:
    return "uint32";
  case ValueType::Int32:
    return "int32";
  case ValueType::Float32:
    return "float32";
  case ValueType::Bool:
    return "bool";
  case ValueType::String:
    return "string";
  case ValueType::Array:
    return "array";
  case ValueType::UInt64:
    return "uint64";
  case ValueType::Int64:
    return "int64";
  case ValueType::Float64:
    return "float64";
  }
  return "unknown";
}

bool isIntegerType(ValueType t) {
  switch (t) {
  case ValueType::UInt8:
  case ValueType::Int8:
  case ValueType::UInt16:
  case ValueType::Int16:
  case ValueType::UInt32:
  case ValueType::Int32:
  case ValueType::UInt64:
  case ValueType::Int64:
    return true;
  default:
    return false;
  }
}

size_t scalarSize(ValueType t) {
  switch (t) {
  case ValueType::UInt8:
  case ValueType::Int8:
  case ValueType::Bool:
    return 1;
  case ValueType::UInt16:
  case ValueType::Int16:
    return 2;
  case ValueType::UInt32:
  case ValueType::Int32:
  case ValueType::Float32:
    return 4;
  case ValueType::UInt64:
  case ValueType::Int64:
  case ValueType::Float64:
    return 8;
  default:
    return 0;
  }
}

namespace {
/// True for int8/16/32/64.
bool isSignedType(ValueType t) {
  return t == ValueType::Int8 || t == ValueType::Int16 || t == ValueType::Int32 || t == ValueType::Int64;
}
/// True for a value type id in the GGUF table (0..12).
bool isKnownType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::Float64); }
} // namespace

Value Value::f32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return fromBits(ValueType::Float32, b);
}

Value Value::f64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return fromBits(ValueType::Float64, b);
}

Value Value::string(std::string v) {
  Value r;
  r.type_ = ValueType::String;
  r.str_ = std::move(v);
  return r;
}

Value Value::array(ValueType elemType, std::vector<Value> elems) {
  Value r;
  r.type_ = ValueType::Array;
  r.elemType_ = elemType;
  r.elems_ = std::move(elems);
  return r;
}

bool Value::isSigned() const { return isSignedType(type_); }

double Value::asFloat() const {
  if (type_ == ValueType::Float32) {
    float f;
    uint32_t b = static_cast<uint32_t>(bits_);
    std::memcpy(&f, &b, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits_, 8);
  return d;
}

std::string Value::toString(size_t maxElems) const {
  switch (type_) {
  case ValueType::String:
    return fmt::format("\"{}\"", printable(str_, str_.size()));
  case ValueType::Bool:
    return bits_ ? "true" : "false";
  case ValueType::Float32:
    return fmt::format("{}", static_cast<float>(asFloat()));
  case ValueType::Float64:
    return fmt::format("{}", asFloat());
  case ValueType::Array: {
    std::string s = "[";
    for (size_t i = 0; i < elems_.size() && i < maxElems; ++i)
      s += (i ? ", " : "") + elems_[i].toString(maxElems);
    if (elems_.size() > maxElems)
      s += fmt::format(", ... ({} elements)", elems_.size());
    return s + "]";
  }
  default:
    return isSigned() ? fmt::format("{}", asSigned()) : fmt::format("{}", asUnsigned());
  }
}

bool Value::operator==(const Value &o) const {
  if (type_ != o.type_)
    return false;
  if (type_ == ValueType::String)
    return str_ == o.str_;
  if (type_ == ValueType::Array)
    return elemType_ == o.elemType_ && elems_ == o.elems_;
  return bits_ == o.bits_;
}

std::string printable(std::string_view s, size_t maxBytes) {
  std::string out;
  for (char c : s.substr(0, maxBytes)) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\')
      out += "\\\\";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return s.size() > maxBytes ? fmt::format("{}... ({} bytes)", out, s.size()) : out;
}

std::string describeShape(const std::vector<uint64_t> &ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i)
    s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

/// Reads the layout of GGUFFile.h from file->data_. Every method returns false after recording the
/// first error in `err`.
class Parser {
public:
  explicit Parser(GGUFFile &f) : f(f), data(f.data_), size(f.size_) {}

  bool run();
  std::string err;

private:
  /// Records "<file>: offset N: <field>: <msg>" and returns false.
  bool fail(uint64_t at, const std::string &field, const std::string &msg) {
    if (err.empty())
      err = fmt::format("{}: offset {}: {}: {}", f.path_, at, field, msg);
    return false;
  }
  uint64_t left() const { return size - pos; }
  bool need(uint64_t n, const std::string &field) {
    if (n > left())
      return fail(pos, field, fmt::format("unexpected end of file (need {} bytes, {} left)", n, left()));
    return true;
  }
  template <typename T> bool read(T &out, const std::string &field) {
    if (!need(sizeof(T), field))
      return false;
    std::memcpy(&out, data + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool readString(std::string &out, const std::string &field, uint64_t maxLen);
  bool readValue(ValueType t, Value &out, const std::string &field, unsigned depth);
  bool readArray(Value &out, const std::string &field, unsigned depth);
  bool readTensorInfo(size_t index, TensorInfo &t);
  bool checkTensors();

  GGUFFile &f;
  const uint8_t *data;
  uint64_t size;
  uint64_t pos = 0;
};

bool Parser::readString(std::string &out, const std::string &field, uint64_t maxLen) {
  uint64_t at = pos;
  uint64_t len;
  if (!read(len, field + " length"))
    return false;
  if (len > left())
    return fail(at, field,
                fmt::format("string length {} exceeds the {} bytes left in the file", len, left()));
  if (len > maxLen)
    return fail(at, field, fmt::format("string length {} exceeds the limit of {} bytes", len, maxLen));
  out.assign(reinterpret_cast<const char *>(data + pos), len);
  pos += len;
  return true;
}

bool Parser::readValue(ValueType t, Value &out, const std::string &field, unsigned depth) {
  uint64_t at = pos;
  switch (t) {
  case ValueType::UInt8: {
    uint8_t v;
    if (!read(v, field))
      return false;
    out = Value::u8(v);
    return true;
  }
  case ValueType::Int8: {
    int8_t v;
    if (!read(v, field))
      return false;
    out = Value::i8(v);
    return true;
  }
  case ValueType::UInt16: {
    uint16_t v;
    if (!read(v, field))
      return false;
    out = Value::u16(v);
    return true;
  }
  case ValueType::Int16: {
    int16_t v;
    if (!read(v, field))
      return false;
    out = Value::i16(v);
    return true;
  }
  case ValueType::UInt32: {
    uint32_t v;
    if (!read(v, field))
      return false;
    out = Value::u32(v);
    return true;
  }
  case ValueType::Int32: {
    int32_t v;
    if (!read(v, field))
      return false;
    out = Value::i32(v);
    return true;
  }
  case ValueType::UInt64: {
    uint64_t v;
    if (!read(v, field))
      return false;
    out = Value::u64(v);
    return true;
  }
  case ValueType::Int64: {
    int64_t v;
    if (!read(v, field))
      return false;
    out = Value::i64(v);
    return true;
  }
  case ValueType::Float32: {
    float v;
    if (!read(v, field))
      return false;
    out = Value::f32(v);
    return true;
  }
  case ValueType::Float64: {
    double v;
    if (!read(v, field))
      return false;
    out = Value::f64(v);
    return true;
  }
  case ValueType::Bool: {
    uint8_t v;
    if (!read(v, field))
      return false;
    if (v > 1)
      return fail(at, field, fmt::format("bool value {} is not 0 or 1", v));
    out = Value::boolean(v != 0);
    return true;
  }
  case ValueType::String: {
    std::string s;
    if (!readString(s, field, std::numeric_limits<uint64_t>::max()))
      return false;
    out = Value::string(std::move(s));
    return true;
  }
  case ValueType::Array:
    return readArray(out, field, depth + 1);
  }
  return fail(at, field, fmt::format("unknown metadata value type {}", static_cast<uint32_t>(t)));
}

bool Parser::readArray(Value &out, const std::string &field, unsigned depth) {
  uint64_t at = pos;
  if (depth > kMaxArrayDepth)
    return fail(at, field, fmt::format("arrays nested deeper than {} levels", kMaxArrayDepth));
  uint32_t rawType;
  if (!read(rawType, field + " element type"))
    return false;
  if (!isKnownType(rawType))
    return fail(at, field, fmt::format("unknown array element type {}", rawType));
  ValueType elemType = static_cast<ValueType>(rawType);
  uint64_t count;
  if (!read(count, field + " length"))
    return false;
  // The smallest encoding of one element: a scalar's size, a string's length field, or an inner array's
  // type + count. count * minBytes cannot overflow: count is compared first against left() / minBytes.
  uint64_t minBytes = elemType == ValueType::String  ? 8
                      : elemType == ValueType::Array ? 12
                                                     : scalarSize(elemType);
  if (count > left() / minBytes)
    return fail(at, field,
                fmt::format("array length {} of {} needs at least {} bytes per element, only {} bytes left",
                            count, valueTypeName(elemType), minBytes, left()));
  std::vector<Value> elems(count);
  for (uint64_t i = 0; i < count; ++i)
    if (!readValue(elemType, elems[i], fmt::format("{}[{}]", field, i), depth))
      return false;
  out = Value::array(elemType, std::move(elems));
  return true;
}

bool Parser::readTensorInfo(size_t index, TensorInfo &t) {
  std::string field = fmt::format("tensor_infos[{}]", index);
  if (!readString(t.name, field + ".name", std::numeric_limits<uint64_t>::max()))
    return false;
  if (t.name.empty())
    return fail(pos - 8, field + ".name", "tensor name is empty");
  if (t.name.size() >= kMaxTensorName)
    return fail(pos, field + ".name",
                fmt::format("tensor name of {} bytes is too long (ggml allows at most {})", t.name.size(),
                            kMaxTensorName - 1));
  field = fmt::format("tensor '{}'", printable(t.name));
  uint64_t at = pos;
  uint32_t nDims;
  if (!read(nDims, field + " n_dims"))
    return false;
  if (nDims == 0 || nDims > kMaxDims)
    return fail(at, field, fmt::format("n_dims {} is not between 1 and {}", nDims, kMaxDims));
  t.ne.resize(nDims);
  uint64_t nelements = 1;
  for (uint32_t d = 0; d < nDims; ++d) {
    at = pos;
    if (!read(t.ne[d], fmt::format("{} ne[{}]", field, d)))
      return false;
    if (t.ne[d] == 0)
      return fail(at, field, fmt::format("dimension ne[{}] is 0 (every dimension must be at least 1)", d));
    if (__builtin_mul_overflow(nelements, t.ne[d], &nelements) ||
        nelements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(at, field,
                  fmt::format("shape {}... has more than 2^63-1 elements (int64 overflow)",
                              describeShape(std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + d + 1))));
  }
  t.nelements = nelements;
  at = pos;
  uint32_t rawType;
  if (!read(rawType, field + " type"))
    return false;
  const GGMLTypeInfo *info = ggmlTypeInfo(rawType);
  if (!info)
    return fail(at, field, fmt::format("unknown ggml tensor type {}", rawType));
  t.type = info->type;
  std::optional<uint64_t> rowBytes = ggmlRowBytes(t.type, t.ne[0]);
  if (!rowBytes)
    return fail(at, field,
                fmt::format("row of {} elements is not a whole number of {} blocks ({} elements each)",
                            t.ne[0], info->name, info->blockElems));
  uint64_t rows = nelements / t.ne[0];
  if (__builtin_mul_overflow(*rowBytes, rows, &t.nbytes))
    return fail(at, field, fmt::format("byte size of shape {} overflows uint64", describeShape(t.ne)));
  if (!read(t.offset, field + " offset"))
    return false;
  return true;
}

/// Checks alignment, bounds and overlap of the tensor data (after the data section offset is known).
bool Parser::checkTensors() {
  uint64_t dataSize = size - f.dataOffset_;
  std::vector<size_t> order(f.tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) {
    TensorInfo &t = f.tensors_[i];
    std::string field = fmt::format("tensor '{}'", printable(t.name));
    order[i] = i;
    if (t.offset % f.alignment_ != 0)
      return fail(
          f.dataOffset_, field,
          fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, f.alignment_));
    if (t.offset > dataSize)
      return fail(f.dataOffset_, field,
                  fmt::format("data offset {} is past the end of the file (data section holds {} bytes)",
                              t.offset, dataSize));
    if (t.nbytes > dataSize - t.offset)
      return fail(
          f.dataOffset_ + t.offset, field,
          fmt::format("{} bytes of data at offset {} run past the end of the file (truncated? the data "
                      "section holds {} bytes)",
                      t.nbytes, t.offset, dataSize));
    t.fileOffset = f.dataOffset_ + t.offset;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo &a = f.tensors_[order[k - 1]];
    const TensorInfo &b = f.tensors_[order[k]];
    if (b.offset < a.offset + a.nbytes)
      return fail(b.fileOffset, fmt::format("tensor '{}'", printable(b.name)),
                  fmt::format("data [{}, {}) overlaps tensor '{}' at [{}, {})", b.offset, b.offset + b.nbytes,
                              printable(a.name), a.offset, a.offset + a.nbytes));
  }
  return true;
}

bool Parser::run() {
  uint32_t magic;
  if (!read(magic, "magic"))
    return false;
  if (std::memcmp(data, "GGUF", 4) != 0)
    return fail(0, "magic",
                fmt::format("not a GGUF file (first bytes {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')",
                            data[0], data[1], data[2], data[3]));
  uint32_t version;
  if (!read(version, "version"))
    return false;
  if (version != 2 && version != 3)
    return fail(4, "version",
                fmt::format("unsupported GGUF version {}{} (tpc reads versions 2 and 3)", version,
                            version > 0xffff ? ", a big-endian file?" : ""));
  f.version_ = version;
  uint64_t tensorCount, kvCount;
  if (!read(tensorCount, "tensor_count") || !read(kvCount, "metadata_kv_count"))
    return false;
  // Smallest possible entries: a key/value is key length + type + one byte; a tensor info is name
  // length + n_dims + one dimension + type + offset.
  constexpr uint64_t kMinKV = 8 + 4 + 1, kMinTensor = 8 + 4 + 8 + 4 + 8;
  if (tensorCount > left() / kMinTensor)
    return fail(8, "tensor_count", fmt::format("{} tensors cannot fit in a {}-byte file", tensorCount, size));
  if (kvCount > left() / kMinKV)
    return fail(16, "metadata_kv_count",
                fmt::format("{} key/value pairs cannot fit in a {}-byte file", kvCount, size));

  std::unordered_set<std::string> keys;
  uint64_t alignmentAt = 0; // offset of general.alignment's value type, for errors
  f.metadata_.reserve(kvCount);
  for (uint64_t i = 0; i < kvCount; ++i) {
    Metadata m;
    uint64_t at = pos;
    std::string field = fmt::format("metadata[{}].key", i);
    if (!readString(m.key, field, std::numeric_limits<uint64_t>::max()))
      return false;
    if (!keys.insert(m.key).second)
      return fail(at, field, fmt::format("duplicate metadata key '{}'", printable(m.key)));
    field = fmt::format("metadata '{}'", printable(m.key));
    at = pos;
    uint32_t rawType;
    if (!read(rawType, field + " value type"))
      return false;
    if (!isKnownType(rawType))
      return fail(at, field, fmt::format("unknown metadata value type {}", rawType));
    if (!readValue(static_cast<ValueType>(rawType), m.value, field, 0))
      return false;
    if (m.key == "general.alignment")
      alignmentAt = at;
    f.metadata_.push_back(std::move(m));
  }

  for (size_t i = 0; i < f.metadata_.size(); ++i)
    if (f.metadata_[i].key == "general.alignment") {
      const Value &v = f.metadata_[i].value;
      if (!v.isInteger() || v.isSigned())
        return fail(alignmentAt, "general.alignment",
                    fmt::format("has type {}, expected an unsigned integer", valueTypeName(v.type())));
      uint64_t a = v.asUnsigned();
      if (a == 0)
        return fail(alignmentAt, "general.alignment", "alignment is 0; it must be a power of two");
      if ((a & (a - 1)) != 0)
        return fail(alignmentAt, "general.alignment", fmt::format("alignment {} is not a power of two", a));
      if (a > UINT32_MAX) // ggml stores it as uint32
        return fail(alignmentAt, "general.alignment", fmt::format("alignment {} does not fit in uint32", a));
      f.alignment_ = a;
    }

  std::unordered_set<std::string> names;
  f.tensors_.reserve(tensorCount);
  for (uint64_t i = 0; i < tensorCount; ++i) {
    uint64_t at = pos;
    TensorInfo t;
    if (!readTensorInfo(i, t))
      return false;
    if (!names.insert(t.name).second)
      return fail(at, fmt::format("tensor_infos[{}].name", i),
                  fmt::format("duplicate tensor name '{}'", printable(t.name)));
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; a file with no tensors may end
  // before it.
  uint64_t rem = pos % f.alignment_;
  uint64_t pad = rem ? f.alignment_ - rem : 0;
  if (__builtin_add_overflow(pos, pad, &f.dataOffset_))
    return fail(pos, "data section", "offset overflows uint64");
  if (f.dataOffset_ > size) {
    if (!f.tensors_.empty())
      return fail(
          pos, "data section",
          fmt::format("starts at {} past the end of the {}-byte file (truncated after the tensor infos)",
                      f.dataOffset_, size));
    f.dataOffset_ = size;
  }
  return checkTensors();
}

GGUFFile::~GGUFFile() {
  if (mapping_)
    munmap(mapping_, size_);
}

Expected<std::unique_ptr<GGUFFile>> GGUFFile::parse(std::unique_ptr<GGUFFile> file) {
  Parser p(*file);
  if (!p.run())
    return Error{p.err};
  for (size_t i = 0; i < file->metadata_.size(); ++i)
    file->metadataIndex_.emplace(file->metadata_[i].key, i);
  for (size_t i = 0; i < file->tensors_.size(); ++i)
    file->tensorIndex_.emplace(file->tensors_[i].name, i);
  return std::move(file);
}

Expected<std::unique_ptr<GGUFFile>> GGUFFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Error{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{fmt::format("{}: not a regular file", path)};
  }
  if (st.st_size == 0) {
    ::close(fd);
    return Error{fmt::format("{}: offset 0: magic: the file is empty (0 bytes)", path)};
  }
  void *m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (m == MAP_FAILED)
    return Error{fmt::format("{}: cannot map {} bytes: {}", path, st.st_size, std::strerror(mapErrno))};
  std::unique_ptr<GGUFFile> f(new GGUFFile());
  f->path_ = path;
  f->mapping_ = m;
  f->data_ = static_cast<const uint8_t *>(m);
  f->size_ = static_cast<uint64_t>(st.st_size);
  return parse(std::move(f));
}

Expected<std::unique_ptr<GGUFFile>> GGUFFile::openBuffer(const uint8_t *data, size_t size, std::string name) {
  std::unique_ptr<GGUFFile> f(new GGUFFile());
  f->path_ = std::move(name);
  f->buffer_.assign(data, data + size);
  f->data_ = f->buffer_.data();
  f->size_ = size;
  return parse(std::move(f));
}

const Value *GGUFFile::find(std::string_view key) const {
  auto it = metadataIndex_.find(key);
  return it == metadataIndex_.end() ? nullptr : &metadata_[it->second].value;
}

const TensorInfo *GGUFFile::findTensor(std::string_view name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

Error GGUFFile::keyError(std::string_view key, const std::string &what) const {
  return Error{fmt::format("{}: metadata key '{}' {}", path_, printable(key), what)};
}

Expected<const Value *> GGUFFile::require(std::string_view key) const {
  const Value *v = find(key);
  if (!v)
    return keyError(key, "is missing");
  return v;
}

namespace {
/// Stores the integer in `v` into `out` when it fits in T; false otherwise.
template <typename T> bool intInRange(const Value &v, T &out) {
  if (v.isSigned()) {
    int64_t s = v.asSigned();
    if constexpr (std::is_signed_v<T>) {
      if (s < std::numeric_limits<T>::min() || s > std::numeric_limits<T>::max())
        return false;
    } else {
      if (s < 0 || static_cast<uint64_t>(s) > std::numeric_limits<T>::max())
        return false;
    }
    out = static_cast<T>(s);
    return true;
  }
  uint64_t u = v.asUnsigned();
  if (u > static_cast<uint64_t>(std::numeric_limits<T>::max()))
    return false;
  out = static_cast<T>(u);
  return true;
}

/// The GGUF name of the integer type a getter returns.
template <typename T> const char *intName() {
  if constexpr (std::is_same_v<T, uint32_t>)
    return "uint32";
  else if constexpr (std::is_same_v<T, uint64_t>)
    return "uint64";
  else
    return "int64";
}

/// Converts one scalar to T, or returns a description of the mismatch.
template <typename T> std::optional<std::string> convert(const Value &v, T &out) {
  if constexpr (std::is_same_v<T, float>) {
    if (v.type() != ValueType::Float32 && v.type() != ValueType::Float64)
      return fmt::format("has type {}, expected float32", valueTypeName(v.type()));
    out = static_cast<float>(v.asFloat());
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v.type() != ValueType::Bool)
      return fmt::format("has type {}, expected bool", valueTypeName(v.type()));
    out = v.asBool();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (v.type() != ValueType::String)
      return fmt::format("has type {}, expected string", valueTypeName(v.type()));
    out = v.asString();
  } else {
    if (!v.isInteger())
      return fmt::format("has type {}, expected {}", valueTypeName(v.type()), intName<T>());
    if (!intInRange(v, out))
      return fmt::format("value {} does not fit in {}", v.toString(), intName<T>());
  }
  return std::nullopt;
}
} // namespace

#define TPC_GGUF_SCALAR_GETTER(Name, T)                                                                      \
  Expected<T> GGUFFile::get##Name(std::string_view key) const {                                              \
    Expected<const Value *> v = require(key);                                                                \
    if (!v)                                                                                                  \
      return Error{v.message()};                                                                               \
    T out{};                                                                                                 \
    if (std::optional<std::string> e = convert(**v, out))                                                    \
      return keyError(key, *e);                                                                              \
    return out;                                                                                              \
  }                                                                                                          \
  Expected<T> GGUFFile::get##Name##Or(std::string_view key, T def) const {                                   \
    if (!find(key))                                                                                          \
      return def;                                                                                            \
    return get##Name(key);                                                                                   \
  }

TPC_GGUF_SCALAR_GETTER(U32, uint32_t)
TPC_GGUF_SCALAR_GETTER(U64, uint64_t)
TPC_GGUF_SCALAR_GETTER(I64, int64_t)
TPC_GGUF_SCALAR_GETTER(F32, float)
TPC_GGUF_SCALAR_GETTER(Bool, bool)
TPC_GGUF_SCALAR_GETTER(String, std::string)
#undef TPC_GGUF_SCALAR_GETTER

#define TPC_GGUF_ARRAY_GETTER(Name, T)                                                                       \
  Expected<std::vector<T>> GGUFFile::get##Name##Array(std::string_view key) const {                          \
    Expected<const Value *> v = require(key);                                                                \
    if (!v)                                                                                                  \
      return Error{v.message()};                                                                               \
    if (!(*v)->isArray())                                                                                    \
      return keyError(key, fmt::format("has type {}, expected an array", valueTypeName((*v)->type())));      \
    std::vector<T> out((*v)->elems().size());                                                                \
    for (size_t i = 0; i < out.size(); ++i) {                                                                \
      T x{};                                                                                                 \
      if (std::optional<std::string> e = convert((*v)->elems()[i], x))                                       \
        return keyError(key, fmt::format("element {} {}", i, *e));                                           \
      out[i] = std::move(x);                                                                                 \
    }                                                                                                        \
    return out;                                                                                              \
  }

TPC_GGUF_ARRAY_GETTER(U32, uint32_t)
TPC_GGUF_ARRAY_GETTER(I64, int64_t)
TPC_GGUF_ARRAY_GETTER(F32, float)
TPC_GGUF_ARRAY_GETTER(Bool, bool)
TPC_GGUF_ARRAY_GETTER(String, std::string)
#undef TPC_GGUF_ARRAY_GETTER

} // namespace tpc::gguf
