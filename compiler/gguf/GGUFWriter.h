//===- GGUFWriter.h - GGUF v3 file writer -------------------------*- C++ -*-===//
//
// Builds a GGUF v3 file (layout in GGUFFile.h): metadata in the order it was first set, tensor infos in
// the order they were added, tensor data packed in that order, each tensor at a multiple of the
// alignment. write() preallocates the file, maps it and lets a callback fill each tensor's bytes in
// place, from several threads at once, so multi-GB models stream through without a copy. The file is
// written under a temporary name and renamed when complete, so a failed write leaves no partial model.
//
// Usage:
//   GGUFWriter w;                         // alignment 32; setAlignment(64) also writes general.alignment
//   w.setString("general.architecture", "llama");
//   w.setU32("llama.block_count", 4);
//   w.setArray("tokenizer.ggml.tokens", ValueType::String, {Value::string("<unk>"), ...});
//   Expected<size_t> idx = w.addTensor("token_embd.weight", GGMLType::F32, {256, 512});
//   Expected<void> ok = w.write("out.gguf", [](size_t tensor, uint8_t *dst, size_t nbytes) { ... }, 8);
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_GGUF_GGUFWRITER_H
#define TPC_COMPILER_GGUF_GGUFWRITER_H

#include "compiler/gguf/GGUFFile.h"

#include <functional>

namespace tpc::gguf {

/// Writes GGUF v3 files; see the file comment.
class GGUFWriter {
public:
  /// Fills the `nbytes` bytes of tensor `tensorIndex` at `dst` (zeroed beforehand). Called once per
  /// tensor, possibly from several threads at once for different tensors.
  using FillFn = std::function<void(size_t tensorIndex, uint8_t *dst, size_t nbytes)>;

  GGUFWriter() = default;

  /// Sets a metadata value; a key set twice keeps its first position and takes the new value.
  void set(const std::string &key, Value value);
  void setU8(const std::string &key, uint8_t v) { set(key, Value::u8(v)); }
  void setI8(const std::string &key, int8_t v) { set(key, Value::i8(v)); }
  void setU16(const std::string &key, uint16_t v) { set(key, Value::u16(v)); }
  void setI16(const std::string &key, int16_t v) { set(key, Value::i16(v)); }
  void setU32(const std::string &key, uint32_t v) { set(key, Value::u32(v)); }
  void setI32(const std::string &key, int32_t v) { set(key, Value::i32(v)); }
  void setU64(const std::string &key, uint64_t v) { set(key, Value::u64(v)); }
  void setI64(const std::string &key, int64_t v) { set(key, Value::i64(v)); }
  void setF32(const std::string &key, float v) { set(key, Value::f32(v)); }
  void setF64(const std::string &key, double v) { set(key, Value::f64(v)); }
  void setBool(const std::string &key, bool v) { set(key, Value::boolean(v)); }
  void setString(const std::string &key, std::string v) { set(key, Value::string(std::move(v))); }
  /// An array of `elemType` (which may itself be Array, for nested arrays).
  void setArray(const std::string &key, ValueType elemType, std::vector<Value> elems) {
    set(key, Value::array(elemType, std::move(elems)));
  }
  void setU32Array(const std::string &key, const std::vector<uint32_t> &v);
  void setI32Array(const std::string &key, const std::vector<int32_t> &v);
  void setF32Array(const std::string &key, const std::vector<float> &v);
  void setBoolArray(const std::string &key, const std::vector<bool> &v);
  void setStringArray(const std::string &key, const std::vector<std::string> &v);

  /// Sets the data alignment (a power of two) and the `general.alignment` key; 32 writes no key.
  Expected<void> setAlignment(uint64_t alignment);
  uint64_t alignment() const { return alignment_; }

  /// Adds a tensor (shape in ggml ne order, 1..4 dims, each >= 1, ne[0] whole quant blocks); returns its
  /// index for the fill callback. Errors name the tensor.
  Expected<size_t> addTensor(const std::string &name, GGMLType type, std::vector<uint64_t> ne);
  /// The tensors added so far; offset and nbytes are final, fileOffset is set by layout().
  const std::vector<TensorInfo> &tensors() const { return tensors_; }

  /// Size of the header (magic through tensor infos, before padding) and of the whole file.
  struct Layout {
    uint64_t dataOffset = 0;
    uint64_t fileSize = 0;
  };
  /// Computes the layout (also checks every metadata value is well-formed: array element types match).
  Expected<Layout> layout() const;

  /// Writes the file at `path` with `threads` fill workers (0 = hardware concurrency). An empty `fill`
  /// leaves the tensor data zero, as a hole where the filesystem allows (no blocks reserved).
  Expected<void> write(const std::string &path, const FillFn &fill, unsigned threads = 1) const;
  /// Writes into memory (tests).
  Expected<std::vector<uint8_t>> writeToBuffer(const FillFn &fill, unsigned threads = 1) const;

private:
  Expected<void> serialize(uint8_t *dst, const Layout &layout, const FillFn &fill, unsigned threads) const;

  uint64_t alignment_ = kDefaultAlignment;
  std::vector<Metadata> metadata_;
  std::vector<TensorInfo> tensors_;
  uint64_t dataSize_ = 0;
};

} // namespace tpc::gguf

#endif // TPC_COMPILER_GGUF_GGUFWRITER_H
