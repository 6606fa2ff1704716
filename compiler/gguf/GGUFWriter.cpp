//===- GGUFWriter.cpp - GGUF v3 file writer ---------------------------------===//
//
// Layout first (sizes of every key, value and tensor info), then one preallocated, mapped file written
// front to back; tensor fills run on a small pool of threads that take tensors from a shared counter.
// Assumes a little-endian host, like the reader.
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFWriter.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace tpc::gguf {

namespace {
/// Bytes `v` occupies (without its type tag), or nullopt when an array element has the wrong type.
std::optional<uint64_t> valueSize(const Value &v, unsigned depth) {
  if (v.type() == ValueType::String)
    return 8 + v.asString().size();
  if (v.type() != ValueType::Array)
    return scalarSize(v.type());
  if (depth >= kMaxArrayDepth)
    return std::nullopt;
  uint64_t n = 4 + 8;
  for (const Value &e : v.elems()) {
    if (e.type() != v.elemType())
      return std::nullopt;
    std::optional<uint64_t> s = valueSize(e, depth + 1);
    if (!s)
      return std::nullopt;
    n += *s;
  }
  return n;
}

/// Appends bytes at a cursor.
struct Out {
  uint8_t *p;
  template <typename T> void put(T v) {
    std::memcpy(p, &v, sizeof(T));
    p += sizeof(T);
  }
  void putString(const std::string &s) {
    put<uint64_t>(s.size());
    std::memcpy(p, s.data(), s.size());
    p += s.size();
  }
  void putValue(const Value &v) {
    switch (v.type()) {
    case ValueType::String:
      putString(v.asString());
      return;
    case ValueType::Array:
      put<uint32_t>(static_cast<uint32_t>(v.elemType()));
      put<uint64_t>(v.elems().size());
      for (const Value &e : v.elems())
        putValue(e);
      return;
    default: {
      // Integers, bools and floats: the low bytes of the stored bits, little-endian. Floats are not
      // converted: float -> double -> float would quiet a signalling NaN and change its bits.
      uint64_t bits = v.asUnsigned();
      std::memcpy(p, &bits, scalarSize(v.type()));
      p += scalarSize(v.type());
      return;
    }
    }
  }
};

uint64_t alignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/// Faults in the pages of [p, p + n) with one system call where the kernel supports it (Linux 5.14+);
/// one page fault per 4 KiB page otherwise costs about a third of the write time. Failure is harmless.
void prefault(uint8_t *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  madvise(reinterpret_cast<void *>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)n;
#endif
}
} // namespace

void GGUFWriter::set(const std::string &key, Value value) {
  for (Metadata &m : metadata_)
    if (m.key == key) {
      m.value = std::move(value);
      return;
    }
  metadata_.push_back({key, std::move(value)});
}

/// Wraps each element with `make` (Value::u32, Value::string, ...).
template <typename T, typename F> static std::vector<Value> toValues(const std::vector<T> &v, F make) {
  std::vector<Value> out;
  out.reserve(v.size());
  for (const T &x : v)
    out.push_back(make(x));
  return out;
}

void GGUFWriter::setU32Array(const std::string &key, const std::vector<uint32_t> &v) {
  setArray(key, ValueType::UInt32, toValues(v, Value::u32));
}
void GGUFWriter::setI32Array(const std::string &key, const std::vector<int32_t> &v) {
  setArray(key, ValueType::Int32, toValues(v, Value::i32));
}
void GGUFWriter::setF32Array(const std::string &key, const std::vector<float> &v) {
  setArray(key, ValueType::Float32, toValues(v, Value::f32));
}
void GGUFWriter::setBoolArray(const std::string &key, const std::vector<bool> &v) {
  std::vector<Value> out;
  for (bool b : v)
    out.push_back(Value::boolean(b));
  setArray(key, ValueType::Bool, std::move(out));
}
void GGUFWriter::setStringArray(const std::string &key, const std::vector<std::string> &v) {
  setArray(key, ValueType::String, toValues(v, Value::string));
}

Expected<void> GGUFWriter::setAlignment(uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX)
    return Error{fmt::format("GGUF alignment {} is not a power of two below 2^32", alignment)};
  alignment_ = alignment;
  if (alignment != kDefaultAlignment)
    setU32("general.alignment", static_cast<uint32_t>(alignment));
  return {};
}

Expected<size_t> GGUFWriter::addTensor(const std::string &name, GGMLType type, std::vector<uint64_t> ne) {
  if (name.empty() || name.size() >= kMaxTensorName)
    return Error{fmt::format("tensor '{}': name must be 1..{} bytes", name, kMaxTensorName - 1)};
  for (const TensorInfo &t : tensors_)
    if (t.name == name)
      return Error{fmt::format("tensor '{}': added twice", name)};
  if (ne.empty() || ne.size() > kMaxDims)
    return Error{fmt::format("tensor '{}': {} dimensions, expected 1..{}", name, ne.size(), kMaxDims)};
  const GGMLTypeInfo *info = ggmlTypeInfo(static_cast<uint32_t>(type));
  if (!info)
    return Error{fmt::format("tensor '{}': unknown ggml type {}", name, static_cast<uint32_t>(type))};
  uint64_t n = 1;
  for (uint64_t d : ne)
    if (d == 0 || __builtin_mul_overflow(n, d, &n) || n > uint64_t(INT64_MAX))
      return Error{fmt::format("tensor '{}': bad shape {}", name, describeShape(ne))};
  std::optional<uint64_t> rowBytes = ggmlRowBytes(type, ne[0]);
  if (!rowBytes)
    return Error{fmt::format("tensor '{}': ne[0] = {} is not a whole number of {} blocks ({} elements)", name,
                             ne[0], info->name, info->blockElems)};
  TensorInfo t;
  t.name = name;
  t.type = type;
  t.ne = std::move(ne);
  t.nelements = n;
  uint64_t start = alignUp(dataSize_, alignment_);
  if (__builtin_mul_overflow(*rowBytes, n / t.ne[0], &t.nbytes) ||
      __builtin_add_overflow(start, t.nbytes, &dataSize_))
    return Error{fmt::format("tensor '{}': byte size overflows", name)};
  t.offset = start;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

Expected<GGUFWriter::Layout> GGUFWriter::layout() const {
  // Offsets were assigned with the alignment current at addTensor time; a later setAlignment would
  // invalidate them.
  for (const TensorInfo &t : tensors_)
    if (t.offset % alignment_ != 0)
      return Error{"GGUFWriter: setAlignment must be called before addTensor"};
  uint64_t n = 4 + 4 + 8 + 8;
  for (const Metadata &m : metadata_) {
    std::optional<uint64_t> s = valueSize(m.value, 0);
    if (!s)
      return Error{
          fmt::format("metadata '{}': array elements do not match the array's element type, or arrays "
                      "nest deeper than {} levels",
                      m.key, kMaxArrayDepth)};
    n += 8 + m.key.size() + 4 + *s;
  }
  for (const TensorInfo &t : tensors_)
    n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  Layout l;
  l.dataOffset = alignUp(n, alignment_);
  l.fileSize = l.dataOffset + alignUp(dataSize_, alignment_);
  return l;
}

Expected<void> GGUFWriter::serialize(uint8_t *dst, const Layout &layout, const FillFn &fill,
                                     unsigned threads) const {
  Out o{dst};
  o.put<uint32_t>(0x46554747); // "GGUF"
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(metadata_.size());
  for (const Metadata &m : metadata_) {
    o.putString(m.key);
    o.put<uint32_t>(static_cast<uint32_t>(m.value.type()));
    o.putValue(m.value);
  }
  for (const TensorInfo &t : tensors_) {
    o.putString(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne)
      o.put<uint64_t>(d);
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(t.offset);
  }
  if (!fill || tensors_.empty())
    return {};
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, tensors_.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < tensors_.size(); i = next++) {
      uint8_t *p = dst + layout.dataOffset + tensors_[i].offset;
      prefault(p, tensors_[i].nbytes);
      fill(i, p, tensors_[i].nbytes);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  return {};
}

Expected<std::vector<uint8_t>> GGUFWriter::writeToBuffer(const FillFn &fill, unsigned threads) const {
  Expected<Layout> l = layout();
  if (!l)
    return Error{l.message()};
  std::vector<uint8_t> buf(l->fileSize, 0);
  Expected<void> ok = serialize(buf.data(), *l, fill, threads);
  if (!ok)
    return Error{ok.message()};
  return buf;
}

Expected<void> GGUFWriter::write(const std::string &path, const FillFn &fill, unsigned threads) const {
  Expected<Layout> l = layout();
  if (!l)
    return Error{fmt::format("{}: {}", path, l.message())};
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Error{fmt::format("{}: cannot create: {}", tmp, std::strerror(errno))};
  auto failWith = [&](const std::string &what) -> Expected<void> {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: {}: {}", tmp, what, std::strerror(e))};
  };
  // Reserve the blocks up front so a full disk fails here rather than as SIGBUS inside a fill. Without a
  // fill the tensor data stays a hole that reads as zeros (a sparse file of real shapes, for tests).
  int rc = fill ? posix_fallocate(fd, 0, static_cast<off_t>(l->fileSize)) : 0;
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    errno = rc;
    return failWith(fmt::format("cannot allocate {} bytes", l->fileSize));
  }
  if (ftruncate(fd, static_cast<off_t>(l->fileSize)) != 0)
    return failWith(fmt::format("cannot size to {} bytes", l->fileSize));
  void *m = mmap(nullptr, l->fileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return failWith("cannot map for writing");
  Expected<void> ok = serialize(static_cast<uint8_t *>(m), *l, fill, threads);
  // No msync: the blocks were reserved by posix_fallocate, and waiting for the disk here would halve
  // the write speed of a multi-GB model; the kernel writes the pages back after munmap.
  munmap(m, l->fileSize);
  if (!ok) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return ok;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: cannot close: {}", tmp, std::strerror(errno))};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return Error{fmt::format("{}: cannot rename to {}: {}", tmp, path, std::strerror(e))};
  }
  return {};
}

} // namespace tpc::gguf
