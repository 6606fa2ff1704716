//===- PlanIO.cpp - plan files and the GGUF fingerprint --------------------===//
//
// The only file that sees the generated FlatBuffers types. Loading is: magic, FlatBuffers verifier (all
// offsets and vectors inside the buffer), schema version, copy into the plain structs, validatePlan().
// The GGUF fingerprint walks the GGUF header just far enough to find the end of the tensor infos, with
// every read bounds-checked (the file is untrusted), and hashes that region plus 16 samples of the data.
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanIO.h"

#include "runtime/plan/plan_generated.h"

#include <flatbuffers/flatbuffers.h>
#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tpc::rt {

namespace fbs = tpc::fb;

namespace {
/// A scalar vector's elements, copied bytewise: a damaged (but verified) buffer may place an int64 vector
/// at a 4-byte boundary, where element-wise loads would be misaligned. FlatBuffers data is little-endian.
template <typename T> std::vector<T> vec(const flatbuffers::Vector<T> *v) {
  static_assert(FLATBUFFERS_LITTLEENDIAN, "plan files are little-endian");
  std::vector<T> out(v ? v->size() : 0);
  if (!out.empty())
    std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}
std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }
} // namespace

std::vector<uint8_t> serializePlan(const Plan &plan) {
  flatbuffers::FlatBufferBuilder b(1 << 16);
  auto model = fbs::CreateModel(b, b.CreateString(plan.model.arch), plan.model.nVocab, plan.model.nCtxTrain,
                                plan.model.maxBatch, plan.model.defaultCtx, plan.model.maxOutputRows);
  const PlanTokenizer &tk = plan.tokenizer;
  auto tokenizer = fbs::CreateTokenizer(
      b, b.CreateString(tk.model), b.CreateString(tk.pre), b.CreateVectorOfStrings(tk.tokens),
      b.CreateVector(tk.scores), b.CreateVector(tk.tokenTypes), b.CreateVectorOfStrings(tk.merges), tk.bosId,
      tk.eosId, tk.unkId, tk.padId, tk.sepId, tk.eotId, tk.eomId, tk.addBos, tk.addEos, tk.addSpacePrefix,
      b.CreateString(tk.chatTemplate), tk.ignoreMerges, tk.cleanSpaces, b.CreateString(tk.chatTemplateToolUse));
  std::vector<flatbuffers::Offset<fbs::Device>> devices;
  for (const DevicePlan &dev : plan.devices) {
    std::vector<flatbuffers::Offset<fbs::WeightSlice>> weights;
    for (const WeightSlice &w : dev.weights) {
      std::vector<flatbuffers::Offset<fbs::WeightPiece>> pieces;
      for (const WeightPiece &p : w.pieces)
        pieces.push_back(fbs::CreateWeightPiece(b, p.fileOffset, p.rowStride, p.rowBytes, p.rows));
      weights.push_back(fbs::CreateWeightSlice(
          b, b.CreateString(w.name), static_cast<uint32_t>(w.type), b.CreateVector(w.shape), w.offset,
          w.bytes, b.CreateVector(pieces), static_cast<fbs::Placement>(w.placement)));
    }
    std::vector<flatbuffers::Offset<fbs::KvCache>> kv;
    for (const KvCache &c : dev.kv)
      // `dtype` (what a v7 reader takes for both halves) says F32 for an f32 K half, else F16; v8
      // readers take type_k / type_v.
      kv.push_back(fbs::CreateKvCache(b, c.layer, c.nHeadKv, c.headDimK, c.headDimV,
                                      c.typeK == GGMLType::F32 ? fbs::DType_F32 : fbs::DType_F16,
                                      static_cast<fbs::Placement>(c.placement), c.window,
                                      static_cast<fbs::CacheKind>(c.kind), c.convRows, c.convChannels,
                                      static_cast<uint32_t>(c.typeK), static_cast<uint32_t>(c.typeV)));
    std::vector<flatbuffers::Offset<fbs::Tensor>> tensors;
    for (const TensorDesc &t : dev.tensors)
      tensors.push_back(fbs::CreateTensor(b, t.id, static_cast<fbs::DType>(t.dtype), b.CreateVector(t.shape),
                                          static_cast<fbs::Storage>(t.storage), t.offset, t.index,
                                          static_cast<fbs::Placement>(t.placement)));
    std::vector<flatbuffers::Offset<fbs::Step>> steps;
    for (const Step &s : dev.steps)
      steps.push_back(fbs::CreateStep(b, static_cast<uint16_t>(s.op), b.CreateVector(s.inputs),
                                      b.CreateVector(s.outputs), b.CreateVector(s.ints),
                                      b.CreateVector(s.floats), b.CreateString(s.name),
                                      static_cast<fbs::Placement>(s.placement)));
    devices.push_back(fbs::CreateDevice(b, b.CreateString(dev.kind), dev.ordinal, dev.weightBytes,
                                        dev.activationBytes, dev.kvBytesPerToken, b.CreateVector(weights),
                                        b.CreateVector(kv), b.CreateVector(tensors), b.CreateVector(steps),
                                        dev.hostActivationBytes));
  }
  auto root = fbs::CreatePlan(b, plan.schemaVersion, b.CreateString(plan.compilerVersion),
                              b.CreateString(plan.ggufPath), plan.ggufSize, plan.ggufFingerprint, model,
                              tokenizer, b.CreateVector(devices), static_cast<fbs::CommDtype>(plan.commDtype),
                              plan.stages);
  b.Finish(root);
  std::vector<uint8_t> out(kPlanMagic, kPlanMagic + sizeof(kPlanMagic));
  out.insert(out.end(), b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  return out;
}

Expected<bool> writePlan(const Plan &plan, const std::string &path) {
  std::vector<uint8_t> bytes = serializePlan(plan);
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return Error{fmt::format("cannot write plan '{}': {}", path, std::strerror(errno))};
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok)
    return Error{fmt::format("cannot write plan '{}': disk full or I/O error", path)};
  return true;
}

Expected<Plan> parsePlan(const uint8_t *data, size_t size, const std::string &what) {
  using E = Expected<Plan>;
  if (size < sizeof(kPlanMagic) || std::memcmp(data, kPlanMagic, sizeof(kPlanMagic)) != 0)
    return Error{
        fmt::format("'{}' is not a tpc plan (no TPCPLAN1 magic); produce one with `tpc compile`", what)};
  const uint8_t *fb = data + sizeof(kPlanMagic);
  size_t fbSize = size - sizeof(kPlanMagic);
  // FlatBuffers needs an aligned buffer; the 8-byte magic keeps it aligned when `data` is.
  std::vector<uint8_t> aligned;
  if (reinterpret_cast<uintptr_t>(fb) % 8 != 0) {
    aligned.assign(fb, fb + fbSize);
    fb = aligned.data();
  }
  flatbuffers::Verifier::Options opts;
  opts.max_tables = 1u << 28;
  flatbuffers::Verifier verifier(fb, fbSize, opts);
  if (fbSize < 8 || !verifier.VerifyBuffer<fbs::Plan>(nullptr))
    return Error{fmt::format("plan '{}' is truncated or corrupted (FlatBuffers verification failed); "
                                "recompile it with `tpc compile`",
                                what)};
  const fbs::Plan *p = fbs::GetPlan(fb);
  if (p->schema_version() > kPlanSchemaVersion)
    return Error{
        fmt::format("plan '{}': plan schema v{} is newer than this tpc (v{}); recompile with this "
                    "tpc or update",
                    what, p->schema_version(), kPlanSchemaVersion)};
  if (p->schema_version() < 1)
    return Error{fmt::format("plan '{}': schema version {} is invalid; recompile with `tpc compile`", what,
                                p->schema_version())};
  Plan plan;
  plan.schemaVersion = p->schema_version();
  plan.compilerVersion = str(p->compiler_version());
  plan.ggufPath = str(p->gguf_path());
  plan.ggufSize = p->gguf_size();
  plan.ggufFingerprint = p->gguf_fingerprint();
  // Before v9 there was no such field: f32 payloads, whatever a writer left there.
  plan.commDtype = p->schema_version() >= 9 ? static_cast<CommDtype>(p->comm_dtype()) : CommDtype::F32;
  plan.stages = p->stages(); // 1 in plans before v9
  if (const fbs::Model *m = p->model()) {
    plan.model.arch = str(m->arch());
    plan.model.nVocab = m->n_vocab();
    plan.model.nCtxTrain = m->n_ctx_train();
    plan.model.maxBatch = m->max_batch();
    plan.model.defaultCtx = m->default_ctx();
    plan.model.maxOutputRows = m->max_output_rows();
  }
  if (const fbs::Tokenizer *t = p->tokenizer()) {
    PlanTokenizer &tk = plan.tokenizer;
    tk.model = str(t->model());
    tk.pre = str(t->pre());
    if (t->tokens())
      for (auto s : *t->tokens())
        tk.tokens.push_back(str(s));
    tk.scores = vec(t->scores());
    tk.tokenTypes = vec(t->token_types());
    if (t->merges())
      for (auto s : *t->merges())
        tk.merges.push_back(str(s));
    tk.bosId = t->bos_id();
    tk.eosId = t->eos_id();
    tk.unkId = t->unk_id();
    tk.padId = t->pad_id();
    tk.sepId = t->sep_id();
    tk.eotId = t->eot_id();
    tk.eomId = t->eom_id();
    tk.ignoreMerges = t->ignore_merges();
    tk.cleanSpaces = t->clean_spaces();
    tk.addBos = t->add_bos();
    tk.addEos = t->add_eos();
    tk.addSpacePrefix = t->add_space_prefix();
    tk.chatTemplate = str(t->chat_template());
    tk.chatTemplateToolUse = str(t->chat_template_tool_use());
  }
  if (p->devices()) {
    for (const fbs::Device *d : *p->devices()) {
      DevicePlan dev;
      dev.kind = str(d->kind());
      dev.ordinal = d->ordinal();
      dev.weightBytes = d->weight_bytes();
      dev.activationBytes = d->activation_bytes();
      dev.kvBytesPerToken = d->kv_bytes_per_token();
      dev.hostActivationBytes = d->host_activation_bytes();
      if (d->weights())
        for (const fbs::WeightSlice *w : *d->weights()) {
          WeightSlice s;
          s.name = str(w->name());
          s.type = static_cast<GGMLType>(w->ggml_type());
          s.shape = vec(w->shape());
          s.offset = w->offset();
          s.bytes = w->bytes();
          if (w->pieces())
            for (const fbs::WeightPiece *pc : *w->pieces())
              s.pieces.push_back({pc->file_offset(), pc->row_stride(), pc->row_bytes(), pc->rows()});
          s.placement = static_cast<Placement>(w->placement());
          dev.weights.push_back(std::move(s));
        }
      if (d->kv())
        for (const fbs::KvCache *c : *d->kv()) {
          KvCache kc;
          kc.layer = c->layer(), kc.nHeadKv = c->n_head_kv();
          kc.headDimK = c->head_dim_k(), kc.headDimV = c->head_dim_v();
          // Before v8 one dtype (F16 or F32) described both halves.
          const GGMLType old = c->dtype() == fbs::DType_F32   ? GGMLType::F32
                               : c->dtype() == fbs::DType_F16 ? GGMLType::F16
                                                              : GGMLType::I32; // refused by validatePlan
          kc.typeK = plan.schemaVersion >= 8 ? static_cast<GGMLType>(c->type_k()) : old;
          kc.typeV = plan.schemaVersion >= 8 ? static_cast<GGMLType>(c->type_v()) : old;
          kc.placement = static_cast<Placement>(c->placement());
          kc.window = c->window(), kc.kind = static_cast<CacheKind>(c->kind());
          kc.convRows = c->conv_rows(), kc.convChannels = c->conv_channels();
          dev.kv.push_back(kc);
        }
      if (d->tensors())
        for (const fbs::Tensor *t : *d->tensors()) {
          TensorDesc td;
          td.id = t->id();
          td.dtype = static_cast<DType>(t->dtype());
          td.shape = vec(t->shape());
          td.storage = static_cast<Storage>(t->storage());
          td.offset = t->offset();
          td.index = t->index();
          td.placement = static_cast<Placement>(t->placement());
          dev.tensors.push_back(std::move(td));
        }
      if (d->steps())
        for (const fbs::Step *s : *d->steps()) {
          Step st;
          st.op = static_cast<OpKind>(s->op());
          st.inputs = vec(s->inputs());
          st.outputs = vec(s->outputs());
          st.ints = vec(s->ints());
          st.floats = vec(s->floats());
          st.name = str(s->name());
          st.placement = static_cast<Placement>(s->placement());
          dev.steps.push_back(std::move(st));
        }
      // v3 put host activations in the device arena's offset space: a host arena as large as the device's
      // holds them at the same offsets (and no host arena where no activation is host-placed).
      if (plan.schemaVersion < 4)
        for (const TensorDesc &t : dev.tensors)
          if (t.storage == Storage::Activation && t.placement == Placement::Host)
            dev.hostActivationBytes = dev.activationBytes;
      plan.devices.push_back(std::move(dev));
    }
  }
  std::vector<std::string> errs = validatePlan(plan);
  if (!errs.empty())
    return Error{
        fmt::format("plan '{}' is invalid: {}{}; recompile it with `tpc compile`", what, errs[0],
                    errs.size() > 1 ? fmt::format(" (and {} more problems)", errs.size() - 1) : "")};
  return plan;
}

namespace {
/// A small streaming 64-bit hash (multiply-xorshift over 8-byte words); not cryptographic, only to notice
/// a replaced or edited file.
struct Hasher {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  void word(uint64_t w) {
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  void bytes(const uint8_t *p, size_t n) {
    word(n);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      word(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    word(tail);
  }
};

/// A byte buffer grown with realloc: a large block grows by remapping its pages rather than by copying
/// them, and nothing is zeroed first (a std::vector copied and cleared the header region at each doubling).
struct GrowBuf {
  uint8_t *p = nullptr;
  size_t n = 0;
  GrowBuf() = default;
  GrowBuf(const GrowBuf &) = delete;
  GrowBuf &operator=(const GrowBuf &) = delete;
  ~GrowBuf() { std::free(p); }
  bool grow(size_t to) {
    void *q = std::realloc(p, to ? to : 1);
    if (!q)
      return false;
    p = static_cast<uint8_t *>(q);
    n = to;
    return true;
  }
};

/// Bounds-checked reads over the start of the GGUF, which `more(n)` extends to at least n bytes when the
/// walk needs them (false at the end of the file or on a read error): one pass, reading only the header.
struct Cursor {
  GrowBuf &buf;
  const std::function<bool(uint64_t)> &more;
  uint64_t pos = 0;
  bool ok = true;
  bool have(uint64_t k) {
    uint64_t end;
    if (!ok || __builtin_add_overflow(pos, k, &end) || (end > buf.n && !more(end)))
      ok = false;
    return ok;
  }
  template <typename T> T get() {
    T v{};
    if (!have(sizeof(T)))
      return v;
    std::memcpy(&v, buf.p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  void skip(uint64_t k) {
    if (have(k))
      pos += k;
  }
  void skipString() { skip(get<uint64_t>()); }
  void skipValue(uint32_t type, int depth) {
    static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8)
      skipString();
    else if (type == 9 && depth == 0) {
      uint32_t et = get<uint32_t>();
      uint64_t cnt = get<uint64_t>();
      if (et == 8 || et == 9) {
        for (uint64_t i = 0; ok && i < cnt; ++i)
          skipValue(et, depth + 1);
      } else if (et < 13 && sizes[et]) {
        uint64_t b;
        if (__builtin_mul_overflow(cnt, uint64_t(sizes[et]), &b))
          ok = false;
        else
          skip(b);
      } else
        ok = false;
    } else if (type < 13 && sizes[type])
      skip(sizes[type]);
    else
      ok = false;
  }
};

/// End of the tensor-info region (GGUF v2/v3), or 0 when the header cannot be walked.
uint64_t ggufHeaderEnd(Cursor &c) {
  if (c.get<uint32_t>() != 0x46554747u) // "GGUF"
    return 0;
  uint32_t version = c.get<uint32_t>();
  if (version < 2)
    return 0;
  uint64_t nTensors = c.get<uint64_t>(), nKv = c.get<uint64_t>();
  for (uint64_t i = 0; c.ok && i < nKv; ++i) {
    c.skipString();
    c.skipValue(c.get<uint32_t>(), 0);
  }
  for (uint64_t i = 0; c.ok && i < nTensors; ++i) {
    c.skipString();
    uint32_t nd = c.get<uint32_t>();
    if (nd > 8)
      return 0;
    c.skip(8ull * nd + 4 + 8);
  }
  return c.ok ? c.pos : 0;
}
/// An open descriptor of a regular file and its size; the caller closes it.
struct OpenFile {
  int fd;
  uint64_t size;
};
/// `what` names the file in the errors ("GGUF", "plan").
Expected<OpenFile> openRegularFile(const std::string &path, const char *what) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return Error{fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno))};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{fmt::format("{} '{}' is not a regular file", what, path)};
  }
  return OpenFile{fd, static_cast<uint64_t>(st.st_size)};
}
} // namespace

Expected<uint64_t> ggufFingerprint(const std::string &path) {
  auto file = openRegularFile(path, "GGUF");
  if (!file)
    return Error{file.message()};
  const int fd = file->fd;
  const uint64_t size = file->size;
  bool readFailed = false;
  auto readAt = [&](uint64_t off, size_t len, uint8_t *dst) {
    size_t got = 0;
    while (got < len) {
      ssize_t k = ::pread(fd, dst + got, len - got, static_cast<off_t>(off + got));
      if (k <= 0)
        return !(readFailed = true);
      got += static_cast<size_t>(k);
    }
    return true;
  };
  Hasher h;
  h.word(size);
  // The header region (metadata can be MBs: a 262k-token vocabulary is ~6 MB), read as the walk reaches it,
  // in growing blocks.
  GrowBuf buf;
  const std::function<bool(uint64_t)> more = [&](uint64_t need) {
    if (need > size)
      return false;
    const uint64_t want = std::min(size, std::max(need, std::max<uint64_t>(buf.n * 2, 1 << 20)));
    const size_t old = buf.n;
    if (!buf.grow(static_cast<size_t>(want)))
      return !(readFailed = true);
    return readAt(old, buf.n - old, buf.p + old);
  };
  Cursor c{buf, more};
  uint64_t headerEnd = ggufHeaderEnd(c);
  if (readFailed) {
    ::close(fd);
    return Error{fmt::format("cannot read GGUF '{}'", path)};
  }
  if (!headerEnd) {
    // Not a walkable GGUF: hash all of it (the plan check still compares; earlier versions did the same).
    headerEnd = size;
    if (buf.n < headerEnd && !more(headerEnd)) {
      ::close(fd);
      return Error{fmt::format("cannot read GGUF '{}'", path)};
    }
  }
  h.bytes(buf.p, static_cast<size_t>(headerEnd));
  // 16 samples of 64 KiB, evenly spaced over the rest.
  constexpr uint64_t kSample = 64 * 1024;
  uint64_t dataLen = size - headerEnd;
  for (int i = 0; i < 16 && dataLen > 0; ++i) {
    uint64_t len = std::min(kSample, dataLen);
    uint64_t off = headerEnd + (dataLen - len) * i / 15;
    if (!readAt(off, static_cast<size_t>(len), buf.p)) { // buf holds the header: at least 64 KiB, or all
      ::close(fd);
      return Error{fmt::format("cannot read GGUF '{}'", path)};
    }
    h.bytes(buf.p, static_cast<size_t>(len));
  }
  ::close(fd);
  return h.h;
}

Expected<Plan> loadPlan(const std::string &path) {
  // Mapped rather than read: parsing copies what it keeps, so a read would only add a zeroed buffer and a
  // copy of the whole file (megabytes for a 262k-token vocabulary) to the start-up.
  auto file = openRegularFile(path, "plan");
  if (!file)
    return Error{file.message()};
  const int fd = file->fd;
  const size_t size = static_cast<size_t>(file->size);
  if (size == 0) {
    ::close(fd);
    return parsePlan(nullptr, 0, path);
  }
  void *addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED)
    return Error{fmt::format("cannot read plan '{}': {}", path, std::strerror(errno))};
  Expected<Plan> plan = parsePlan(static_cast<const uint8_t *>(addr), size, path);
  ::munmap(addr, size);
  return plan;
}

Expected<std::string> checkPlanGguf(const Plan &plan, const std::string &ggufPath) {
  using E = Expected<std::string>;
  std::string path = ggufPath.empty() ? plan.ggufPath : ggufPath;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Error{fmt::format("GGUF '{}' the plan was compiled from is missing ({}); pass its new location "
                                "with --gguf or recompile",
                                path, std::strerror(errno))};
  if (static_cast<uint64_t>(st.st_size) != plan.ggufSize)
    return Error{
        fmt::format("GGUF '{}' changed since the plan was compiled (size {} != {}); recompile the "
                    "plan with `tpc compile`",
                    path, st.st_size, plan.ggufSize)};
  auto fp = ggufFingerprint(path);
  if (!fp)
    return Error{fp.message()};
  if (*fp != plan.ggufFingerprint)
    return Error{fmt::format("GGUF '{}' changed since the plan was compiled (fingerprint {:016x} != "
                                "{:016x}); recompile the plan with `tpc compile`",
                                path, *fp, plan.ggufFingerprint)};
  return path;
}

} // namespace tpc::rt
