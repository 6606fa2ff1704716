//===- InspectCommand.cpp - `tpc inspect` -----------------------------------===//
//
// `tpc inspect FILE [--json] [--metadata] [--html OUT] [--svg OUT] [--layer L]`: what a file holds. The file
// kind is decided by its magic in one place (detectFileKind, shared with run and serve: ModelSource.h): a
// GGUF model or a device plan; anything else gets one error line.
// For a plan: its header (source GGUF, fingerprint, compiler), model facts and per device the memory (device
// side, and the host side where the plan places anything there),
// steps, collectives and their bytes per token (describePlan); --json gives the same figures; --html writes
// one self-contained page of figures of them and --svg the figures alone (PlanPicture.h).
// For a GGUF: architecture, the hyperparameters the importers read (whichever are present), a tokenizer
// summary, the tensor table and totals per ggml type; --json prints the same as one JSON object and
// --metadata adds every metadata key. Reader errors are the reader's one-line messages (exit status 1).
//===----------------------------------------------------------------------===//
#include "compiler/gguf/GGUFFile.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanSummary.h"
#include "tools/tpc/Command.h"
#include "tools/tpc/ModelSource.h"
#include "tools/tpc/PlanPicture.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tpc::cli {
namespace {

/// The command line of `tpc inspect`.
struct InspectOptions {
  std::string file;
  bool json = false;
  bool metadata = false;
  std::string html, svg; ///< where to write the pictures of a plan
  std::string layer;     ///< the layer the dataflow figure shows first
};

//===----------------------------------------------------------------------===//
// A tiny JSON emitter
//===----------------------------------------------------------------------===//

/// Writes one JSON document into a string; commas are inserted automatically.
class Json {
public:
  void beginObject() { open('{'); }
  void endObject() { close('}'); }
  void beginArray() { open('['); }
  void endArray() { close(']'); }
  /// The key of the next value inside an object.
  void key(std::string_view k) {
    comma();
    quote(k);
    out_ += ':';
    afterKey_ = true;
  }
  void string(std::string_view s) {
    comma();
    quote(s);
  }
  void number(uint64_t v) { raw(fmt::format("{}", v)); }
  void number(int64_t v) { raw(fmt::format("{}", v)); }
  /// Non-finite numbers have no JSON spelling: null.
  void number(double v) { raw(std::isfinite(v) ? fmt::format("{}", v) : "null"); }
  void boolean(bool v) { raw(v ? "true" : "false"); }
  void null() { raw("null"); }
  /// A GGUF metadata value: numbers, bools, strings and (nested) arrays.
  void value(const gguf::Value &v) {
    using gguf::ValueType;
    switch (v.type()) {
    case ValueType::String:
      return string(v.asString());
    case ValueType::Bool:
      return boolean(v.asBool());
    case ValueType::Float32:
      return raw(std::isfinite(v.asFloat()) ? fmt::format("{}", static_cast<float>(v.asFloat())) : "null");
    case ValueType::Float64:
      return number(v.asFloat());
    case ValueType::Array:
      beginArray();
      for (const gguf::Value &e : v.elems())
        value(e);
      return endArray();
    default:
      return v.isSigned() ? number(v.asSigned()) : number(v.asUnsigned());
    }
  }
  const std::string &str() const { return out_; }

private:
  void comma() {
    if (afterKey_) {
      afterKey_ = false;
      return;
    }
    if (!first_)
      out_ += ',';
    first_ = false;
  }
  void open(char c) {
    comma();
    out_ += c;
    first_ = true;
  }
  void close(char c) {
    out_ += c;
    first_ = false;
  }
  void raw(const std::string &s) {
    comma();
    out_ += s;
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (char ch : s) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\')
        out_ += {'\\', ch};
      else if (c < 0x20)
        out_ += fmt::format("\\u{:04x}", c);
      else
        out_ += ch;
    }
    out_ += '"';
  }
  std::string out_;
  bool first_ = true;
  bool afterKey_ = false;
};

//===----------------------------------------------------------------------===//
// GGUF summary
//===----------------------------------------------------------------------===//

/// `<arch>.` keys the importers read, in display order.
const char *const kHparamSuffixes[] = {
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.layer_norm_rms_epsilon",
    "attention.layer_norm_epsilon",
    "rope.freq_base",
    "rope.freq_base_swa",
    "rope.dimension_count",
    "rope.dimension_count_swa",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "sliding_window_pattern",
    "final_logit_softcapping",
    "attn_logit_softcapping",
};

/// llama.cpp's `enum llama_ftype` names (general.file_type), without the MOSTLY_ prefix.
const char *fileTypeName(uint64_t t) {
  static const std::map<uint64_t, const char *> names = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},     {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"},    {12, "Q3_K_M"}, {13, "Q3_K_L"},  {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},    {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
      {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"},   {24, "IQ1_S"},  {25, "IQ4_NL"},  {26, "IQ3_S"},
      {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},     {30, "IQ4_XS"}, {31, "IQ1_M"},   {32, "BF16"},
      {36, "TQ1_0"},  {37, "TQ2_0"},  {38, "MXFP4_MOE"},
  };
  auto it = names.find(t);
  return it == names.end() ? "unknown" : it->second;
}

/// Everything the text and JSON outputs show, gathered once.
struct Summary {
  struct TypeTotal {
    uint64_t tensors = 0, bytes = 0;
  };
  std::string arch; ///< empty when general.architecture is absent or not a string
  std::vector<std::pair<std::string, const gguf::Value *>> hparams; ///< suffix, value
  uint64_t parameters = 0, bytes = 0;
  std::map<uint32_t, TypeTotal> perType; ///< by ggml type id (table order)
};

/// Collects the hyperparameters present and the totals per type.
Summary summarize(const gguf::GGUFFile &f) {
  Summary s;
  if (const gguf::Value *a = f.find("general.architecture"); a && a->type() == gguf::ValueType::String)
    s.arch = a->asString();
  if (!s.arch.empty())
    for (const char *suffix : kHparamSuffixes)
      if (const gguf::Value *v = f.find(s.arch + "." + suffix))
        s.hparams.emplace_back(suffix, v);
  for (const gguf::TensorInfo &t : f.tensors()) {
    s.parameters += t.nelements; // each < 2^63 and at most ~file size / 1 byte each: no overflow
    s.bytes += t.nbytes;
    Summary::TypeTotal &tt = s.perType[static_cast<uint32_t>(t.type)];
    ++tt.tensors;
    tt.bytes += t.nbytes;
  }
  return s;
}

/// The length of an array value, or nullopt.
std::optional<uint64_t> arrayLength(const gguf::GGUFFile &f, std::string_view key) {
  const gguf::Value *v = f.find(key);
  if (!v || !v->isArray())
    return std::nullopt;
  return v->elems().size();
}

/// The tokenizer keys shown in the summary: (label, key).
const std::pair<const char *, const char *> kTokenizerScalars[] = {
    {"model", "tokenizer.ggml.model"},
    {"pre", "tokenizer.ggml.pre"},
    {"bos_token_id", "tokenizer.ggml.bos_token_id"},
    {"eos_token_id", "tokenizer.ggml.eos_token_id"},
    {"add_bos_token", "tokenizer.ggml.add_bos_token"},
};

/// The human-readable report.
std::string printText(const gguf::GGUFFile &f, const Summary &s, bool allMetadata) {
  std::string o;
  auto line = [&o](auto &&...args) {
    o += fmt::format(std::forward<decltype(args)>(args)...);
    o += '\n';
  };
  line("{}: GGUF v{}, {} bytes, alignment {}, data at offset {}", f.path(), f.version(), f.fileSize(),
       f.alignment(), f.dataOffset());
  line("architecture  {}", s.arch.empty() ? "(missing general.architecture)" : s.arch);
  if (const gguf::Value *n = f.find("general.name"))
    line("name          {}", n->type() == gguf::ValueType::String ? n->asString() : n->toString());
  if (const gguf::Value *ft = f.find("general.file_type"); ft && ft->isInteger())
    line("file type     {} ({})", ft->toString(), fileTypeName(ft->asUnsigned()));

  line("");
  line("hyperparameters ({}.*)", s.arch);
  if (s.hparams.empty())
    line("  (none found)");
  for (auto &[suffix, v] : s.hparams)
    line("  {:<34} {}", suffix, v->toString());

  line("");
  line("tokenizer");
  for (auto &[label, key] : kTokenizerScalars) {
    const gguf::Value *v = f.find(key);
    line("  {:<14} {}", label,
         !v                                     ? "(absent)"
         : v->type() == gguf::ValueType::String ? v->asString()
                                                : v->toString());
  }
  std::optional<uint64_t> tokens = arrayLength(f, "tokenizer.ggml.tokens");
  std::optional<uint64_t> merges = arrayLength(f, "tokenizer.ggml.merges");
  line("  {:<14} {}", "tokens", tokens ? fmt::format("{}", *tokens) : "(absent)");
  line("  {:<14} {}", "merges", merges ? fmt::format("{}", *merges) : "(absent)");

  if (allMetadata) {
    line("");
    line("metadata ({} keys)", f.metadata().size());
    for (const gguf::Metadata &m : f.metadata())
      line("  {:<48} {:<8} {}", m.key, gguf::valueTypeName(m.value.type()), m.value.toString(8));
  }

  size_t nameWidth = 4, shapeWidth = 5;
  for (const gguf::TensorInfo &t : f.tensors()) {
    nameWidth = std::max(nameWidth, t.name.size());
    shapeWidth = std::max(shapeWidth, gguf::describeShape(t.ne).size());
  }
  line("");
  line("tensors");
  line("  {:<{}}  {:<7}  {:<{}}  {:>12}", "name", nameWidth, "type", "shape", shapeWidth, "bytes");
  for (const gguf::TensorInfo &t : f.tensors())
    line("  {:<{}}  {:<7}  {:<{}}  {:>12}", t.name, nameWidth, ggmlTypeName(t.type),
         gguf::describeShape(t.ne), shapeWidth, t.nbytes);

  line("");
  line("totals: {} tensors, {} parameters, {} bytes", f.tensors().size(), s.parameters, s.bytes);
  for (auto &[id, tt] : s.perType)
    line("  {:<7} {:>5} tensors {:>14} bytes", ggmlTypeInfo(id)->name, tt.tensors, tt.bytes);
  return o;
}

/// The same report as one JSON object (one line).
std::string printJson(const gguf::GGUFFile &f, const Summary &s, bool allMetadata) {
  Json j;
  j.beginObject();
  j.key("file");
  j.string(f.path());
  j.key("format");
  j.string("gguf");
  j.key("version");
  j.number(uint64_t{f.version()});
  j.key("file_size");
  j.number(f.fileSize());
  j.key("alignment");
  j.number(f.alignment());
  j.key("data_offset");
  j.number(f.dataOffset());
  j.key("architecture");
  s.arch.empty() ? j.null() : j.string(s.arch);
  for (const char *key : {"general.name", "general.file_type"}) {
    j.key(std::string(key).substr(8));
    if (const gguf::Value *v = f.find(key))
      j.value(*v);
    else
      j.null();
  }
  if (const gguf::Value *ft = f.find("general.file_type"); ft && ft->isInteger()) {
    j.key("file_type_name");
    j.string(fileTypeName(ft->asUnsigned()));
  }
  j.key("hparams");
  j.beginObject();
  for (auto &[suffix, v] : s.hparams) {
    j.key(suffix);
    j.value(*v);
  }
  j.endObject();
  j.key("tokenizer");
  j.beginObject();
  for (auto &[label, key] : kTokenizerScalars) {
    j.key(label);
    if (const gguf::Value *v = f.find(key))
      j.value(*v);
    else
      j.null();
  }
  for (auto [label, key] :
       {std::pair{"tokens", "tokenizer.ggml.tokens"}, {"merges", "tokenizer.ggml.merges"}}) {
    j.key(label);
    if (std::optional<uint64_t> n = arrayLength(f, key))
      j.number(*n);
    else
      j.null();
  }
  j.endObject();
  if (allMetadata) {
    j.key("metadata");
    j.beginObject();
    for (const gguf::Metadata &m : f.metadata()) {
      j.key(m.key);
      j.value(m.value);
    }
    j.endObject();
  }
  j.key("tensors");
  j.beginArray();
  for (const gguf::TensorInfo &t : f.tensors()) {
    j.beginObject();
    j.key("name");
    j.string(t.name);
    j.key("type");
    j.string(ggmlTypeName(t.type));
    j.key("shape");
    j.beginArray();
    for (uint64_t d : t.ne)
      j.number(d);
    j.endArray();
    j.key("offset");
    j.number(t.offset);
    j.key("bytes");
    j.number(t.nbytes);
    j.endObject();
  }
  j.endArray();
  j.key("totals");
  j.beginObject();
  j.key("tensors");
  j.number(uint64_t{f.tensors().size()});
  j.key("parameters");
  j.number(s.parameters);
  j.key("bytes");
  j.number(s.bytes);
  j.key("types");
  j.beginObject();
  for (auto &[id, tt] : s.perType) {
    j.key(ggmlTypeInfo(id)->name);
    j.beginObject();
    j.key("tensors");
    j.number(tt.tensors);
    j.key("bytes");
    j.number(tt.bytes);
    j.endObject();
  }
  j.endObject();
  j.endObject();
  j.endObject();
  return j.str() + "\n";
}

/// Opens the GGUF (reader errors become the one-line failure) and prints the report.
void inspectGGUF(const InspectOptions &opts) {
  Expected<std::unique_ptr<gguf::GGUFFile>> f = gguf::GGUFFile::open(opts.file);
  if (!f)
    throw Failure(f.message());
  Summary s = summarize(**f);
  std::string out = opts.json ? printJson(**f, s, opts.metadata) : printText(**f, s, opts.metadata);
  fmt::print("{}", out);
}

/// Writes `text` to `path` whole, or throws naming the flag and the file.
void writeFile(const std::string &flag, const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out)
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out || !out.flush())
    throw Failure(fmt::format("{} {}: cannot write: {}", flag, path, std::strerror(errno)));
}

/// Loads a plan (every loader check applies: a damaged plan is one error line) and prints its summary, or
/// writes its pictures (--html, --svg).
void inspectPlan(const InspectOptions &opts) {
  Expected<rt::Plan> plan = rt::loadPlan(opts.file);
  if (!plan)
    throw Failure(plan.message());
  if (!opts.html.empty() || !opts.svg.empty()) {
    picture::Picture pic = picture::buildPicture(*plan, opts.file, 0);
    pic.chosenLayer = picture::findLayer(pic, opts.layer);
    if (!opts.html.empty()) {
      writeFile("--html", opts.html, picture::renderHtml(pic));
      fmt::print("wrote {}\n", opts.html);
    }
    if (!opts.svg.empty()) {
      writeFile("--svg", opts.svg, picture::renderSvg(pic));
      fmt::print("wrote {}\n", opts.svg);
    }
    return;
  }
  if (!opts.json) {
    fmt::print("{}", rt::describePlan(*plan));
    return;
  }
  Json j;
  j.beginObject();
  j.key("kind");
  j.string("plan");
  j.key("schema_version");
  j.number(static_cast<int64_t>(plan->schemaVersion));
  j.key("compiler_version");
  j.string(plan->compilerVersion);
  j.key("comm_dtype");
  j.string(rt::commDtypeName(plan->commDtype));
  j.key("gguf");
  j.string(plan->ggufPath);
  j.key("gguf_size");
  j.number(static_cast<int64_t>(plan->ggufSize));
  j.key("arch");
  j.string(plan->model.arch);
  j.key("n_vocab");
  j.number(static_cast<int64_t>(plan->model.nVocab));
  j.key("max_batch");
  j.number(static_cast<int64_t>(plan->model.maxBatch));
  j.key("max_output_rows");
  j.number(static_cast<int64_t>(plan->model.maxOutputRows));
  j.key("default_ctx");
  j.number(static_cast<int64_t>(plan->model.defaultCtx));
  j.key("blocks");
  j.number(rt::blockCount(*plan));
  j.key("devices");
  j.beginArray();
  // At the plan's context, as --report gives it.
  const std::vector<rt::DeviceMemory> mem = rt::memoryAt(*plan);
  size_t index = 0;
  for (const rt::DeviceSummary &d : rt::summarizeDevices(*plan)) {
    const rt::DeviceMemory &m = mem[index++];
    j.beginObject();
    j.key("ctx");
    j.number(m.ctx);
    j.key("total_bytes");
    j.number(m.totalBytes);
    j.key("kv_bytes");
    j.number(m.kvBytes);
    j.key("host_total_bytes");
    j.number(m.hostTotalBytes);
    j.key("host_kv_bytes");
    j.number(m.hostKvBytes);
    j.key("weight_bytes");
    j.number(static_cast<int64_t>(d.weightBytes));
    j.key("activation_bytes");
    j.number(static_cast<int64_t>(d.activationBytes));
    j.key("logits_bytes");
    j.number(static_cast<int64_t>(d.logitsBytes));
    j.key("kv_bytes_per_token");
    j.number(static_cast<int64_t>(d.kvBytesPerToken));
    j.key("kv_full_bytes_per_token");
    j.number(static_cast<int64_t>(d.kvFullBytesPerToken));
    j.key("kv_window_bytes_per_position");
    j.number(static_cast<int64_t>(d.kvWindowBytesPerPosition));
    j.key("kv_window_layers");
    j.number(static_cast<int64_t>(d.kvWindowLayers));
    j.key("recurrent_bytes_per_sequence");
    j.number(static_cast<int64_t>(d.recurrentBytesPerSequence));
    j.key("recurrent_layers");
    j.number(static_cast<int64_t>(d.recurrentLayers));
    j.key("host_weight_bytes");
    j.number(static_cast<int64_t>(d.hostWeightBytes));
    j.key("host_activation_bytes");
    j.number(static_cast<int64_t>(d.hostActivationBytes));
    j.key("host_kv_bytes_per_token");
    j.number(static_cast<int64_t>(d.hostKvBytesPerToken));
    j.key("host_steps");
    j.number(static_cast<int64_t>(d.hostSteps));
    j.key("steps");
    j.number(static_cast<int64_t>(d.steps));
    j.key("collectives");
    j.number(static_cast<int64_t>(d.collectives));
    j.key("replicated_matmuls");
    j.number(static_cast<int64_t>(d.replicatedMatmuls));
    j.key("collective_bytes_per_token");
    j.number(static_cast<int64_t>(d.collectiveBytesPerToken));
    j.key("decode_weight_bytes_per_token");
    j.number(static_cast<int64_t>(d.decodeWeightBytes));
    j.key("host_decode_weight_bytes_per_token");
    j.number(static_cast<int64_t>(d.hostDecodeWeightBytes));
    j.endObject();
  }
  j.endArray();
  j.endObject();
  fmt::print("{}\n", j.str());
}

/// Dispatches on the file kind: the one place a new kind is added.
void runInspect(const InspectOptions &opts) {
  std::string head;
  switch (detectFileKind(opts.file, head)) {
  case FileKind::GGUF:
    if (!opts.html.empty() || !opts.svg.empty())
      throw Failure(fmt::format("{}: --html and --svg draw a device plan, and this is a GGUF model; compile it "
                                "first (tpc compile {} -o plan.bin) and inspect the plan",
                                opts.file, opts.file));
    return inspectGGUF(opts);
  case FileKind::Plan:
    return inspectPlan(opts);
  case FileKind::Unknown:
    throw Failure(
        fmt::format("{}: not a file tpc can inspect (first bytes: {}); expected a GGUF model (magic "
                    "'GGUF') or a tpc plan (magic 'TPCPLAN1')",
                    opts.file, hexBytes(head)));
  }
}

/// Adds `inspect` to the CLI.
void registerInspect(CLI::App &app) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App *sub = app.add_subcommand("inspect", "Show what a GGUF model or a device plan holds");
  sub->add_option("file", opts->file, "GGUF model or plan file")->required();
  sub->add_flag("--json", opts->json, "print one JSON object instead of text");
  sub->add_flag("--metadata", opts->metadata, "also list every metadata key and value");
  sub->add_option("--html", opts->html, "plan: write one self-contained page of figures (memory, collectives, "
                                        "weight cuts, one layer's dataflow) to this file");
  sub->add_option("--svg", opts->svg, "plan: write the figures alone as one SVG file");
  sub->add_option("--layer", opts->layer, "the layer whose dataflow is drawn (N, blk.N, embed, output; default: "
                                          "the first block)");
  sub->callback([opts] {
    if (!opts->layer.empty() && opts->html.empty() && opts->svg.empty())
      throw Failure("--layer chooses the layer --html or --svg draws; give one of them too");
    runInspect(*opts);
  });
}

} // namespace

TPC_REGISTER_COMMAND(30, registerInspect);

} // namespace tpc::cli
