//===- PlanFormat.h - the device plan as plain C++ structs --------*- C++ -*-===//
//
// The in-memory form of a tpc device plan: what the compiler's plan emitter fills and what loadPlan()
// returns after verification (STYLE.md §5: parse and validate once, then use immutable structs). The file
// format itself is plan.fbs; only PlanIO.cpp knows the FlatBuffers types.
//
// Assumptions every consumer may rely on after loadPlan() succeeded (validatePlan() checks them):
//  - a tensor's id equals its index in DevicePlan::tensors; step operands are valid ids;
//  - only dim 0 of a shape may be dynamic: -1 (kTokenDim, the tokens of a call, <= maxBatch) or -2
//    (kRowsDim, the output rows of a call, <= maxOutputRows); other dims are >= 0, and 0 is valid (a
//    device's empty share of a split dimension, e.g. no attention heads: [T,0,D] activations, [0,K] / [N,0]
//    weights of 0 bytes, KV caches with 0 heads);
//  - activation and view offsets are multiples of the element size, weight slice offsets of 4;
//  - every ACTIVATION tensor fits its device's activation arena for maxBatch tokens and maxOutputRows rows, every weight slice
//    fits the weight arena and every weight piece lies inside the GGUF file (overflow-checked);
//  - every step has the operand counts its op requires, and every device has the same sequence of
//    collective ops (the k-th collective of each device meets the k-th of every other);
//  - placement is consistent: a non-Copy step's operands are on its side (weights too), a Copy writes
//    its side, collectives run on device-placed tensors, a host step's KV cache is host-placed.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_PLAN_PLANFORMAT_H
#define TPC_RUNTIME_PLAN_PLANFORMAT_H

#include "runtime/ggml/GGMLTypes.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tpc::rt {

/// The schema version this build writes and the newest it reads.
/// 2: AllReduceRmsNorm; 3: step, tensor and weight placement; 4: a host activation arena of its own
/// (DevicePlan::hostActivationBytes); 5: output rows (Storage::InputOutputRows, the kRowsDim dim,
/// ModelInfo::maxOutputRows) and sliding-window KV rings (KvCache::window); 6: recurrent caches
/// (KvCache::kind, convRows, convChannels), the SsmConv, DeltaNet, L2Norm and GatedRmsNorm ops, the
/// attention output gate and UnaryFn::Softplus; 7: the AddId op, UnaryFn::SwigluOai and RoPE's YaRN
/// parameters (gpt-oss); 8: a storage type per cache half (KvCache::typeK, typeV: f32, f16, q8_0, q4_0;
/// `--cache-type-k/-v`); 9: the all-reduce payload on the wire (Plan::commDtype, `--comm-dtype`) and
/// pipeline stages (Plan::stages, Send/Recv steps). Older versions still load (fields default: every row
/// computed, every cache full and an attention cache, both halves of the old `dtype`, f32 payloads, one
/// stage; see parsePlan for v3).
inline constexpr uint32_t kPlanSchemaVersion = 9;
/// The dynamic dims a shape may have in dim 0: the tokens of a call and the rows whose logits it returns.
inline constexpr int64_t kTokenDim = -1;
inline constexpr int64_t kRowsDim = -2;
/// The 8 bytes every plan file starts with.
inline constexpr char kPlanMagic[8] = {'T', 'P', 'C', 'P', 'L', 'A', 'N', '1'};

/// Element type of a plan tensor or KV cache.
enum class DType : uint8_t { F32 = 0, I32 = 1, F16 = 2 };

/// How all-reduce payloads cross the wire between devices (`tpc compile --comm-dtype`): f32, or bf16
/// addends and sums summed in f32 in rank order (runtime/comm/Bf16Wire.h), half the bytes.
enum class CommDtype : uint8_t { F32 = 0, BF16 = 1 };

/// Which side of a device holds a tensor's bytes or runs a step: its accelerator (the default) or the host
/// (`--override-tensor REGEX=cpu`, `--no-kv-offload`). The CPU backend is all host, so there it changes
/// nothing; an accelerator backend runs host steps on host memory and Copy steps across.
enum class Placement : uint8_t { Device = 0, Host = 1 };

/// Where a tensor's bytes live.
enum class Storage : uint8_t {
  Activation = 0,     ///< activation arena, at Tensor::offset
  Weight = 1,         ///< weight slice Tensor::index (its ggml type, not Tensor::dtype, describes it)
  Kv = 2,             ///< KV cache Tensor::index (the K half)
  InputTokens = 3,    ///< the token ids of the current call (i32 [T])
  InputPositions = 4, ///< the positions of the current call (i32 [T])
  OutputLogits = 5,   ///< the logits rows returned to the caller (f32 [R, n_vocab]; [T, n_vocab] in a plan
                      ///< without InputOutputRows)
  View = 6,           ///< aliases tensor Tensor::index at byte offset Tensor::offset
  InputOutputRows = 7, ///< the rows of the call whose logits are returned (i32 [R], indices into the call's
                       ///< tokens, ascending); the plan gathers the last hidden state to them (v5)
};

/// The step vocabulary: the tpc dialect ops after localization. Semantics are per device on local shapes;
/// "x[T,N]" means dim 0 is the token dimension. Scalar parameters (Step::ints / Step::floats) are named
/// here and laid out by their struct in StepParams.h, the only code that indexes those lists.
enum class OpKind : uint16_t {
  GetRows = 0,        ///< (table[R,N] any ggml type, ids[T] i32) -> [T,N]; quantized rows are dequantized;
                      ///< GetRowsParams: optional firstId, the table's first row id (a vocabulary-parallel
                      ///< share): ids outside [firstId, firstId + R) give zero rows
  TakeAlong = 1,      ///< (x[T,N], idx[T,k] i32) -> [T,k]: y[t,j] = x[t, idx[t,j]]
  RmsNorm = 2,        ///< (x[...,N] [, w[N]]) -> x/rms(x) (* w); RmsNormParams: eps
  Matmul = 3,         ///< (x[...,K], w[N,K]) -> [...,N]: y = x·wᵀ, w any ggml type or f32 tensor
  MulMatId = 4,       ///< (x[T,K] or [T,k,K], w[E,N,K], ids[T,k]) -> [T,k,N]: y[t,j] = w[ids[t,j]]·x[t,(j)]
  Add = 5,            ///< (a, b) -> a + b, b broadcast right-aligned (its dims equal a's or 1)
  Mul = 6,            ///< (a, b) -> a * b, broadcast as Add
  Div = 7,            ///< (a, b) -> a / b, broadcast as Add
  Scale = 8,          ///< (x) -> x * value; ScaleParams
  Unary = 9,          ///< (x) -> fn(x); UnaryParams: fn
  Glu = 10,           ///< (x[...,2F]) -> fn(x[..,:F]) * x[..,F:]; or (g, u) -> fn(g) * u; GluParams: fn
  Softmax = 11,       ///< (x) -> softmax over the last axis
  TopK = 12,          ///< (x[...,N]) -> i32 [...,k]: indices, descending, ties -> lower index; TopKParams
  Sum = 13,           ///< (x) -> sum over an axis; SumParams: axis, keepDim
  Reshape = 14,       ///< (x) -> same elements, new shape (no copy when the output is a View of x)
  Permute = 15,       ///< (x) -> y with y.shape[i] = x.shape[perm[i]]; PermuteParams
  View = 16,          ///< (x) -> x narrowed on axis to [offset, offset + size); NarrowParams
  Concat = 17,        ///< (x0, x1, ...) -> concatenation along an axis; AxisParams
  Rope = 18,          ///< (x[T,H,D], pos[T] [, freq_factors[n_dims/2]]); RopeParams: mode (normal, neox),
                      ///< nDims, base, freqScale [, YaRN: origCtx, extFactor, attnFactor, betaFast, betaSlow]
  Softcap = 19,       ///< (x) -> cap * tanh(x / cap); SoftcapParams
  Attention = 20,     ///< (q[T,Hq,Dk], k[T,Hkv,Dk], v[T,Hkv,Dv], pos[T] [, sinks[Hq]]) -> [T,Hq,Dv];
                      ///< AttentionParams: kvCache (index), window (0 none), scale, softcap (0 none).
                      ///< Appends k, v at pos, then causal attention.
  ExpertCombine = 21, ///< (x[T,k,N], m1[T,k], m2[T,k], ...) -> [T,N] = Σ_j Π_i m_i[t,j] · x[t,j,:]
  AllReduce = 22,     ///< (a, b, ...) -> (a', b', ...): sum over devices, several tensors = one bucket
  ReduceScatter = 23, ///< (x) -> this device's part along an axis (AxisParams) of the sum; parts sized by
                      ///< outputs (the output must not alias x: peers read every device's x while parts are
                      ///< written)
  AllGather = 24,     ///< (x) -> concatenation of every device's x along an axis (AxisParams; sizes may
                      ///< differ)
  Slice = 25,         ///< (x) -> x narrowed like View (NarrowParams)
  Copy = 26,          ///< (x) -> y, a backend copy (device <-> host); a memcpy on the CPU backend
  AllReduceRmsNorm = 27, ///< (x[T,N] [, r[T,N]] [, w[N]]) -> (y, n): y = sum over devices of x, with r added
                         ///< on device 0 before the sum (the residual, once); n = rms_norm(y) (* w) over the
                         ///< last axis; AllReduceRmsNormParams: residual (r given), weight (w given), eps. A
                         ///< layer boundary's residual add, all-reduce and norm as one step. y may be x or r
                         ///< (same bytes), n overlaps neither x nor y.
  SsmConv = 28,       ///< (x[T,C], w[C,K], pos[T]) -> [T,C]: causal depthwise conv over each sequence's inputs with
                      ///< the conv state of recurrent cache SsmConvParams::kvCache (K-1 rows per sequence;
                      ///< zero where a sequence starts at position 0); runtime/cpu/DeltaNet.h
  DeltaNet = 29,      ///< (q[T,Hk,D], k[T,Hk,D], v[T,Hv,Dv], g[T,Hv], beta[T,Hv], pos[T]) -> [T,Hv,Dv]: the gated
                      ///< delta rule with the state of recurrent cache DeltaNetParams::kvCache (value head h
                      ///< reads key head h % Hk); DeltaNetParams: kvCache, scale (of q)
  L2Norm = 30,        ///< (x[...,N]) -> x / max(|x|, eps) over the last axis; RmsNormParams: eps
  GatedRmsNorm = 31,  ///< (x[...,N], w[N], z[...,N]) -> rms_norm(x) * w * silu(z); RmsNormParams: eps
  AddId = 32,         ///< (x[T,k,N], b[E,N], ids[T,k] i32) -> x + b[ids] (per-expert biases); AddIdParams:
                      ///< optional firstExpert (b holds experts [firstExpert, firstExpert + E); the other
                      ///< ids add nothing)
  Send = 33,          ///< (x) -> (): x to plan device TransferParams::peer of another pipeline stage (v9); the
                      ///< k-th Send of device a to b meets the k-th Recv of b from a (same shape and dtype)
  Recv = 34,          ///< () -> (y): y from plan device TransferParams::peer of another stage (v9)
};
/// Number of OpKind values.
inline constexpr unsigned kNumOpKinds = 35;

/// The elementwise functions of Unary and Glu.
enum class UnaryFn : int64_t {
  Silu = 0, Gelu = 1, GeluTanh = 2, Tanh = 3, Relu = 4, Exp = 5, Sigmoid = 6,
  Softplus = 7, ///< log(1 + exp(x)) (x itself above 20, as ggml)
  SwigluOai = 8, ///< Glu only (gpt-oss): min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1)
};

/// Name of an op ("matmul"), for errors and profiles.
const char *opKindName(OpKind op);
/// True for the ops that meet the other devices (AllReduce, ReduceScatter, AllGather).
bool isCollective(OpKind op);
/// True for the point-to-point ops between pipeline stages (Send, Recv).
bool isStageTransfer(OpKind op);

/// One contiguous run of rows copied from the GGUF.
struct WeightPiece {
  uint64_t fileOffset = 0; ///< byte offset of row 0 in the GGUF
  uint64_t rowStride = 0;  ///< bytes between consecutive source rows
  uint64_t rowBytes = 0;   ///< bytes copied per row
  uint64_t rows = 0;       ///< number of rows
};

/// A device-local weight: pieces copied in order pack it densely (ggml layout) at `offset`.
struct WeightSlice {
  std::string name;                ///< GGUF tensor name
  GGMLType type = GGMLType::F32;   ///< storage type of the rows
  std::vector<int64_t> shape;      ///< local logical shape, outermost first, innermost = row
  uint64_t offset = 0;             ///< byte offset in the weight arena
  uint64_t bytes = 0;              ///< packed size (= sum of pieces' rows * rowBytes)
  std::vector<WeightPiece> pieces; ///< copy order
  Placement placement = Placement::Device; ///< Host: kept in host memory, read by host steps only
};

/// What a cache holds per sequence.
enum class CacheKind : uint8_t {
  Attention = 0, ///< K and V rows per position
  Recurrent = 1, ///< one state per sequence (a linear-attention layer): its conv state in the K half
                 ///< ([convRows, convChannels]) and its delta-rule state in the V half ([nHeadKv,
                 ///< headDimK, headDimV]), both f32; it does not grow with the context (v6)
};

/// One layer's cache on one device, sized at run time from the context size and the session's
/// sequences: kvPositions() cells per sequence, each [nHeadKv, headDim] for K and for V (an attention
/// cache), or one cell per sequence holding the conv and delta-rule states (a recurrent cache).
///
/// Storage types (v8), per half as llama.cpp's `-ctk`/`-ctv`: F16 (the default), F32, Q8_0 or Q4_0. A
/// quantized half stores each head's row of headDim values as headDim / 32 ggml blocks (BlockQ8_0: f16
/// scale + 32 int8; BlockQ4_0: f16 scale + 16 bytes of nibbles), so a cell is nHeadKv such rows and a
/// head's row starts at a whole block: the head dims of a quantized half are multiples of 32 (validated).
/// A recurrent cache is F32 in both halves.
struct KvCache {
  int32_t layer = 0;
  int32_t nHeadKv = 0; ///< local KV heads (recurrent: local value heads)
  int32_t headDimK = 0;
  int32_t headDimV = 0;
  GGMLType typeK = GGMLType::F16;          ///< storage of the K half (see above; recurrent: F32)
  GGMLType typeV = GGMLType::F16;          ///< storage of the V half
  Placement placement = Placement::Device; ///< Host: --no-kv-offload (device steps may read it, mapped)
  /// The capacity kind (v5). 0: full, the context's positions per sequence. > 0: the layer's sliding
  /// window; its attention never looks further back, so the cache is a ring of window + max_batch
  /// positions per sequence (position p in cell p mod size): a call appends up to max_batch positions
  /// before its first token reads the window-1 positions behind it.
  int32_t window = 0;
  CacheKind kind = CacheKind::Attention; ///< (v6)
  int32_t convRows = 0;     ///< recurrent: rows of the conv state (the conv kernel width - 1)
  int32_t convChannels = 0; ///< recurrent: local conv channels
};

/// Cells per sequence cache `c` holds for a context of `ctx` (full) with calls of at most `maxBatch`
/// tokens: ctx, or min(ctx, window + maxBatch) for a sliding-window ring, or 1 for a recurrent state.
inline int64_t kvPositions(const KvCache &c, int64_t ctx, int64_t maxBatch) {
  if (c.kind == CacheKind::Recurrent)
    return 1;
  return c.window > 0 ? std::min<int64_t>(ctx, int64_t(c.window) + maxBatch) : ctx;
}
/// Bytes of cache `c` per position (K and V of its local heads).
inline uint64_t kvBytesPerPosition(const KvCache &c);

/// A tensor a step reads or writes.
struct TensorDesc {
  int32_t id = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; ///< -1 in dim 0 = token dimension
  Storage storage = Storage::Activation;
  uint64_t offset = 0; ///< Activation: byte offset in its side's arena; View: byte offset into the base
  int32_t index = -1;  ///< Weight: slice; Kv: cache; View: base tensor id
  /// Activation: which side's arena holds the bytes (the device arena of activationBytes or the host
  /// arena of hostActivationBytes); View: its base's (validated equal). Unused for the other storage
  /// kinds: weights and KV caches carry their own, inputs and logits are device-side.
  Placement placement = Placement::Device;
};

/// One operation of a device's program.
struct Step {
  OpKind op = OpKind::Copy;
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string name; ///< for profiles
  /// Where the step runs; for a Copy, its destination side (the IR's backend_copy `to`).
  Placement placement = Placement::Device;
};

/// Everything one device runs.
struct DevicePlan {
  std::string kind = "cpu"; ///< backend hint
  int32_t ordinal = 0;
  uint64_t weightBytes = 0;
  uint64_t activationBytes = 0;     ///< the device-side activation arena
  uint64_t kvBytesPerToken = 0;     ///< K and V bytes of one position of every cache (kvBytesPerPosition)
  uint64_t hostActivationBytes = 0; ///< the host-side activation arena (host-placed activations only)
  std::vector<WeightSlice> weights;
  std::vector<KvCache> kv;
  std::vector<TensorDesc> tensors;
  std::vector<Step> steps;
};

/// Model facts the runtime needs.
struct ModelInfo {
  std::string arch;
  int64_t nVocab = 0;
  int64_t nCtxTrain = 0;
  int64_t maxBatch = 0;   ///< tokens per evaluate() the activation arenas hold
  int64_t defaultCtx = 0; ///< context when the user gives none
  /// Logits rows per call the arenas hold (the InputOutputRows input's size, <= maxBatch; v5). 0: a plan
  /// without that input, which computes a row for every token.
  int64_t maxOutputRows = 0;
};

/// The GGUF tokenizer, every field (tpc::rt::TokenizerData is built from this).
struct PlanTokenizer {
  std::string model; ///< tokenizer.ggml.model: "llama", "gpt2", ...
  std::string pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> tokenTypes;
  std::vector<std::string> merges;
  int32_t bosId = -1, eosId = -1, unkId = -1, padId = -1, sepId = -1, eotId = -1, eomId = -1;
  bool addBos = false, addEos = false, addSpacePrefix = false;
  bool ignoreMerges = false, cleanSpaces = false;
  std::string chatTemplate;
  std::string chatTemplateToolUse; ///< tokenizer.chat_template.tool_use (empty: none)
};

/// A whole plan.
struct Plan {
  uint32_t schemaVersion = kPlanSchemaVersion;
  std::string compilerVersion;
  std::string ggufPath;
  uint64_t ggufSize = 0;
  uint64_t ggufFingerprint = 0;
  ModelInfo model;
  PlanTokenizer tokenizer;
  std::vector<DevicePlan> devices;
  /// (v9) The all-reduce payload; `tpc run/serve/perplexity --comm-dtype` override it at open
  /// (SessionOptions::commDtype).
  CommDtype commDtype = CommDtype::F32;
  /// Pipeline stages (v9): stage s is devices [s * n / stages, (s + 1) * n / stages), each running a
  /// contiguous range of layers split over its own devices; collectives stay inside a stage, Send/Recv
  /// cross between them. 1: every device runs every layer.
  uint32_t stages = 1;
};

/// Devices per stage and the stage of device `d`.
inline size_t devicesPerStage(const Plan &p) { return p.stages ? p.devices.size() / p.stages : p.devices.size(); }
inline int stageOf(const Plan &p, size_t d) { return static_cast<int>(d / std::max<size_t>(1, devicesPerStage(p))); }

/// Fills a DevicePlan step by step (what the compiler's emitter and the tests use). Tensor ids are
/// assigned in order; activation offsets are the caller's (the compiler plans memory).
class DevicePlanBuilder {
public:
  explicit DevicePlanBuilder(DevicePlan &dev) : dev_(dev) {}
  /// An activation tensor at `offset` in side `where`'s activation arena; returns its id.
  int32_t activation(DType dt, std::vector<int64_t> shape, uint64_t offset,
                     Placement where = Placement::Device);
  /// A tensor bound to weight slice `slice`.
  int32_t weight(int32_t slice);
  /// Adds a weight slice; returns its index.
  int32_t addWeight(WeightSlice w);
  /// Adds a KV cache (and its bytes to kvBytesPerToken); returns its index.
  int32_t addKv(KvCache c);
  /// An input/output tensor (InputTokens, InputPositions, InputOutputRows, OutputLogits).
  int32_t io(Storage kind, DType dt, std::vector<int64_t> shape);
  /// A view of `base` at byte `offset` with its own shape (and its base's placement).
  int32_t view(int32_t base, DType dt, std::vector<int64_t> shape, uint64_t offset = 0);
  /// Appends a step running on side `where`; `ints` and `floats` as its StepParams.h struct packs them.
  void step(OpKind op, std::vector<int32_t> in, std::vector<int32_t> out, std::vector<int64_t> ints = {},
            std::vector<float> floats = {}, std::string name = {}, Placement where = Placement::Device);

private:
  DevicePlan &dev_;
};

/// Bytes of one element of `dt`.
inline uint64_t dtypeBytes(DType dt) { return dt == DType::F16 ? 2 : 4; }
/// True for the storage types a cache half may have (F32, F16, Q8_0, Q4_0).
inline bool isKvCacheType(GGMLType t) {
  return t == GGMLType::F32 || t == GGMLType::F16 || t == GGMLType::Q8_0 || t == GGMLType::Q4_0;
}
/// True for the quantized cache types, whose rows are blocks of 32 values.
inline bool isQuantizedKvType(GGMLType t) { return t == GGMLType::Q8_0 || t == GGMLType::Q4_0; }
/// Bytes of one head's row of `n` values in cache type `t` (n a multiple of 32 for the quantized types):
/// 4n, 2n, 34 per 32 (q8_0) or 18 per 32 (q4_0). Every byte count of a cache derives from this.
inline uint64_t kvRowBytes(GGMLType t, int64_t n) {
  const uint64_t u = static_cast<uint64_t>(n);
  switch (t) {
  case GGMLType::F32:
    return 4 * u;
  case GGMLType::Q8_0:
    return u / 32 * 34;
  case GGMLType::Q4_0:
    return u / 32 * 18;
  default:
    return 2 * u; // F16 (validatePlan refuses the others)
  }
}
/// Bytes of one cell's K half and V half (a recurrent cache: its conv state and its delta-rule state).
inline uint64_t kvCellBytesK(const KvCache &c) {
  return c.kind == CacheKind::Recurrent
             ? static_cast<uint64_t>(c.convRows) * static_cast<uint64_t>(c.convChannels) * 4
             : static_cast<uint64_t>(c.nHeadKv) * kvRowBytes(c.typeK, c.headDimK);
}
inline uint64_t kvCellBytesV(const KvCache &c) {
  return c.kind == CacheKind::Recurrent
             ? static_cast<uint64_t>(c.nHeadKv) * c.headDimK * static_cast<uint64_t>(c.headDimV) * 4
             : static_cast<uint64_t>(c.nHeadKv) * kvRowBytes(c.typeV, c.headDimV);
}
/// Bytes per position of context (0 for a recurrent cache, whose size does not grow with the context).
inline uint64_t kvBytesPerPosition(const KvCache &c) {
  return c.kind == CacheKind::Recurrent ? 0 : kvCellBytesK(c) + kvCellBytesV(c);
}
/// Bytes per sequence of a recurrent cache (0 for an attention cache).
inline uint64_t recurrentBytesPerSequence(const KvCache &c) {
  return c.kind == CacheKind::Recurrent ? kvCellBytesK(c) + kvCellBytesV(c) : 0;
}
/// The element count of `shape` for a call of `tokens` tokens and `rows` output rows (dim 0 kTokenDim or
/// kRowsDim substituted); dims were validated.
inline int64_t callElements(const std::vector<int64_t> &shape, int64_t tokens, int64_t rows) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    n *= i == 0 && shape[i] == kTokenDim ? tokens : i == 0 && shape[i] == kRowsDim ? rows : shape[i];
  return n;
}
/// The index of dp's tensor of storage kind `kind` (the first), or -1.
int32_t tensorOfStorage(const DevicePlan &dp, Storage kind);
/// Name of a dtype ("f32").
const char *dtypeName(DType dt);
/// "device" or "host".
const char *placementName(Placement p);
/// "f32" or "bf16".
const char *commDtypeName(CommDtype t);
/// Bytes of one all-reduce payload element on the wire (4 or 2).
inline uint64_t commDtypeBytes(CommDtype t) { return t == CommDtype::BF16 ? 2 : 4; }

/// The side holding tensor `id` of `dev` (an id validatePlan accepted): an activation's or view's own
/// placement, a weight's slice's, a KV cache's; inputs and logits are device-side.
Placement tensorPlacement(const DevicePlan &dev, int32_t id);

/// Problems found by validatePlan(), one line each ("device 1: step 7 (matmul): input 3 ...").
std::vector<std::string> validatePlan(const Plan &plan);

} // namespace tpc::rt

#endif // TPC_RUNTIME_PLAN_PLANFORMAT_H
