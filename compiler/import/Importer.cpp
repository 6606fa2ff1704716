//===- Importer.cpp - GGUF model -> tpc IR ----------------------------------===//
//
// The table of supported architectures and the common frame of @forward: arguments (tokens, positions,
// the output rows whose logits a call returns), embedding table shape (which gives n_vocab), module
// attributes the later stages read, and the shared output head (select_rows, final norm, projection).
//===----------------------------------------------------------------------===//
#include "compiler/import/Importer.h"

#include "compiler/import/Architectures.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

namespace mlir::tpc {
namespace {
struct ArchEntry {
  const char *name;
  ArchBuildFn build;
  HParamNeeds needs; ///< dense FFN, MoE, fixed sliding pattern: the keys they need are required
};
constexpr ArchEntry kArchitectures[] = {
    {"llama", buildLlama, {/*denseFFN=*/true, /*moe=*/false, /*slidingWindow=*/false}},
    {"qwen3", buildQwen3, {true, false, false}},
    {"qwen3moe", buildQwen3, {false, true, false}},
    {"gemma3", buildGemma3, {true, false, true}},
    {"gemma4", buildGemma4, {true, true, false}}, // its sliding layers come from a pattern key
    {"qwen35", buildQwen35, {true, false, false}},   // hybrid: Gated DeltaNet + gated attention
    {"qwen35moe", buildQwen35, {false, true, false}},
    {"glm4moe", buildGlm4Moe, {false, true, false}}, // its dense layers' width is checked with their count
    {"gpt-oss", buildGptOss, {false, true, true}}, // alternating sliding-window layers, MoE with biases
};
} // namespace

std::vector<std::string> supportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchEntry &a : kArchitectures)
    names.emplace_back(a.name);
  return names;
}

AttentionWeights loadAttention(ModelBuilder &mb, const HParams &hp, unsigned il, int64_t Dk, int64_t Dv,
                               bool vOptional) {
  int64_t E = hp.nEmbd, H = hp.nHead, Hkv = hp.nHeadKv[il];
  // The keys each shape comes from, for a mismatch: heads x head size rows, embedding_length columns.
  auto why = [&](const char *heads, int64_t n, const char *size, int64_t d) {
    return hp.arch + ".attention." + heads + " " + std::to_string(n) + " x " + hp.arch + ".attention." + size +
           " " + std::to_string(d) + ", " + hp.arch + ".embedding_length " + std::to_string(E);
  };
  std::string q = why("head_count", H, "key_length", Dk), k = why("head_count_kv", Hkv, "key_length", Dk),
              v = why("head_count_kv", Hkv, "value_length", Dv), o = why("head_count", H, "value_length", Dv);
  std::string vName = blk(il, "attn_v.weight");
  return {mb.weight(blk(il, "attn_q.weight"), {H * Dk, E}, q), mb.weight(blk(il, "attn_k.weight"), {Hkv * Dk, E}, k),
          vOptional ? mb.optionalWeight(vName, {Hkv * Dv, E}, v) : mb.weight(vName, {Hkv * Dv, E}, v),
          mb.weight(blk(il, "attn_output.weight"), {E, H * Dv}, o)};
}

void loadAttentionBiases(ModelBuilder &mb, const HParams &hp, unsigned il, int64_t Dk, int64_t Dv,
                         AttentionWeights &w, bool withOutput) {
  const int64_t H = hp.nHead, Hkv = hp.nHeadKv[il];
  auto why = [&](const char *heads, int64_t n, const char *size, int64_t d) {
    return hp.arch + ".attention." + heads + " " + std::to_string(n) + " x " + size + " " + std::to_string(d);
  };
  w.bq = mb.weight(blk(il, "attn_q.bias"), {H * Dk}, why("head_count", H, "key_length", Dk));
  w.bk = mb.weight(blk(il, "attn_k.bias"), {Hkv * Dk}, why("head_count_kv", Hkv, "key_length", Dk));
  w.bv = mb.weight(blk(il, "attn_v.bias"), {Hkv * Dv}, why("head_count_kv", Hkv, "value_length", Dv));
  if (withOutput)
    w.bo = mb.weight(blk(il, "attn_output.bias"), {hp.nEmbd}, hp.arch + ".embedding_length " + std::to_string(hp.nEmbd));
}

MoeWeights loadMoe(ModelBuilder &mb, const HParams &hp, unsigned il) {
  const int64_t E = hp.nEmbd, X = hp.nExpert, F = hp.nFFExp;
  const std::string why = hp.arch + ".expert_count " + std::to_string(X) + ", " + hp.arch +
                          ".expert_feed_forward_length " + std::to_string(F) + ", " + hp.arch +
                          ".embedding_length " + std::to_string(E);
  MoeWeights w;
  w.router = mb.weight(blk(il, "ffn_gate_inp.weight"), {X, E}, why);
  if (mb.gguf().findTensor(blk(il, "ffn_gate_up_exps.weight"))) {
    w.gateUp = mb.weight(blk(il, "ffn_gate_up_exps.weight"), {X, 2 * F, E}, why);
  } else {
    w.gate = mb.weight(blk(il, "ffn_gate_exps.weight"), {X, F, E}, why);
    w.up = mb.weight(blk(il, "ffn_up_exps.weight"), {X, F, E}, why);
  }
  w.down = mb.weight(blk(il, "ffn_down_exps.weight"), {X, E, F}, why);
  return w;
}

FFNWeights loadFFN(ModelBuilder &mb, const HParams &hp, unsigned il) {
  int64_t E = hp.nEmbd, F = hp.nFF;
  std::string why = hp.arch + ".feed_forward_length " + std::to_string(F) + ", " + hp.arch +
                    ".embedding_length " + std::to_string(E);
  FFNWeights w;
  w.gate = mb.weight(blk(il, "ffn_gate.weight"), {F, E}, why);
  w.up = mb.weight(blk(il, "ffn_up.weight"), {F, E}, why);
  w.down = mb.weight(blk(il, "ffn_down.weight"), {E, F}, why);
  return w;
}

AttentionSpec baseAttentionSpec(const HParams &hp, unsigned il, int64_t Dk, int64_t Dv, RopeMode mode) {
  AttentionSpec spec;
  spec.layer = il;
  spec.nHead = hp.nHead;
  spec.nHeadKv = hp.nHeadKv[il];
  spec.headDimK = Dk;
  spec.headDimV = Dv;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  spec.ropeMode = mode;
  spec.nRot = hp.nRot;
  spec.ropeBase = hp.ropeBase;
  spec.ropeScaling = {hp.ropeFreqScale, hp.ropeExtFactor, hp.ropeAttnFactor, hp.yarnBetaFast, hp.yarnBetaSlow,
                      int64_t(hp.ropeOrigCtx)};
  spec.eps = hp.rmsEps;
  return spec;
}

Value buildOutput(ModelBuilder &mb, const HParams &hp, Value x, Value tokenEmbd) {
  mb.setOutputHead();
  int64_t E = hp.nEmbd, V = hp.nVocab;
  Value outNorm = mb.weight("output_norm.weight", {E});
  Value output = mb.optionalWeight("output.weight", {V, E});
  if (mb.failed())
    return nullptr;
  // Only the rows a call asks for reach the head: generation wants one per sequence, and the output
  // projection (n_vocab wide) is the largest matmul of the model.
  x = mb.selectRows(x, mb.outputRows());
  return mb.matmul(mb.norm(x, outNorm, hp.rmsEps), output ? output : tokenEmbd);
}

OwningOpRef<ModuleOp> importModel(MLIRContext &ctx, const gguf::GGUFFile &file) {
  ctx.loadDialect<TpcDialect, func::FuncDialect>();
  Location loc = FileLineColLoc::get(&ctx, file.path(), 0, 0);
  auto fail = [&](const Twine &msg) {
    emitError(loc) << file.path() << ": " << msg;
    return OwningOpRef<ModuleOp>();
  };

  ::tpc::Expected<std::string> arch = file.getString("general.architecture");
  if (!arch)
    return emitError(loc) << arch.message(), OwningOpRef<ModuleOp>();
  const ArchEntry *entry = nullptr;
  for (const ArchEntry &a : kArchitectures)
    if (*arch == a.name)
      entry = &a;
  if (!entry)
    return fail("unsupported architecture '" + *arch + "' (general.architecture); supported: " +
                llvm::join(supportedArchitectures(), ", "));
  ::tpc::Expected<HParams> hp = readHParams(file, *arch, entry->needs);
  if (!hp)
    return emitError(loc) << hp.message(), OwningOpRef<ModuleOp>();

  // n_vocab is the embedding table's row count (vocab_size metadata is optional in GGUF).
  const gguf::TensorInfo *embd = file.findTensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2)
    return fail("tensor 'token_embd.weight' is missing or not a matrix");
  if (embd->ne[1] > uint64_t(INT32_MAX))
    return fail("tensor 'token_embd.weight' has " + std::to_string(embd->ne[1]) +
                " rows (the vocabulary); token ids are int32, so at most 2147483647");
  hp->nVocab = static_cast<uint32_t>(embd->ne[1]);

  OpBuilder b(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr("tpc.arch", b.getStringAttr(*arch));
  module->getOperation()->setAttr("tpc.gguf", b.getStringAttr(file.path()));
  module->getOperation()->setAttr("tpc.n_vocab", b.getI64IntegerAttr(hp->nVocab));
  module->getOperation()->setAttr("tpc.n_ctx_train", b.getI64IntegerAttr(hp->nCtxTrain));
  b.setInsertionPointToEnd(module->getBody());

  auto ids = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
  auto logitsType = RankedTensorType::get({ShapedType::kDynamic, hp->nVocab}, b.getF32Type());
  auto func = b.create<func::FuncOp>(loc, "forward", b.getFunctionType({ids, ids, ids}, {logitsType}));
  func.setArgAttr(0, "tpc.name", b.getStringAttr("tokens"));
  func.setArgAttr(1, "tpc.name", b.getStringAttr("positions"));
  func.setArgAttr(2, "tpc.name", b.getStringAttr("output_rows"));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);

  ModelBuilder mb(b, loc, file);
  mb.setOutputRows(body->getArgument(2));
  Value logits = entry->build(mb, *hp, body->getArgument(0), body->getArgument(1));
  if (!logits || mb.failed())
    return {};
  mb.clearLayer();
  b.create<func::ReturnOp>(loc, logits);
  return module;
}

} // namespace mlir::tpc
