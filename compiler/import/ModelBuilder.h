//===- ModelBuilder.h - building the tpc forward graph ------------*- C++ -*-===//
//
// The small vocabulary every architecture importer is written in: GGUF weights with their expected
// logical shapes (checked, with errors naming the tensor), and one method per tpc op, plus the blocks that
// several architectures share (attention with optional q/k/v norms, GLU feed-forward, the MoE block).
//
// The MoE block is emitted op by op in the order ggml builds it (router matmul, softmax, top-k, weights,
// mul_mat_id for gate/up/down, GLU, the per-expert scale gathered by expert id, the router weights, the sum
// over experts) so that the MoE fusion pass sees the real chain.
//
// Error handling: weight lookups emit a diagnostic at the module location and return a null Value; importers
// load every weight of a layer first and stop when `failed()`, so no op is ever built on a null operand.
// Ops are built without MLIR's inferring builders, which abort the process when inference fails: an op
// whose types cannot be inferred (hyperparameters the checks in HParams.cpp missed) is an error here.
//
// Layers: every op and weight the builder creates is stamped with the current layer (`tpc.layer = N` after
// setLayer(N), `tpc.layer = "output"` after setOutputHead(), nothing after clearLayer(): the embedding), so
// later stages know which block an op belongs to without reading tensor names.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_IMPORT_MODELBUILDER_H
#define TPC_COMPILER_IMPORT_MODELBUILDER_H

#include "compiler/gguf/GGUFFile.h"
#include "compiler/import/HParams.h"
#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace mlir::tpc {

/// RoPE scaling of tpc.rope (its description has the YaRN formula); the defaults are plain RoPE.
struct RopeScaling {
  float freqScale = 1.f, extFactor = 0.f, attnFactor = 1.f, betaFast = 32.f, betaSlow = 1.f;
  int64_t origCtx = 0;
};

/// Options of one attention block.
struct AttentionSpec {
  unsigned layer = 0;
  int64_t nHead = 0, nHeadKv = 0, headDimK = 0, headDimV = 0;
  float scale = 1.f;
  int64_t slidingWindow = 0;   ///< 0: full causal attention
  RopeMode ropeMode = RopeMode::normal;
  int64_t nRot = 0;
  float ropeBase = 10000.f;
  RopeScaling ropeScaling;     ///< from rope.scaling.* (baseAttentionSpec)
  Value ropeFreqs;             ///< optional frequency factors
  Value sinks;                 ///< optional per-query-head sink logits (gpt-oss)
  Value qNorm, kNorm;          ///< optional per-head RMS-norm weights
  bool vNorm = false;          ///< RMS-normalize V per head without a weight (gemma4)
  bool vFromK = false;         ///< no V projection: V is the K projection before the k norm (gemma4 global)
  float eps = 1e-6f;
};

/// Weights of one attention block.
struct AttentionWeights {
  Value wq, wk, wv, wo;
  Value bq, bk, bv, bo; ///< optional biases of the projections (glm4moe: q/k/v, added before any norm;
                        ///< gpt-oss: all four)
};

/// Weights of one dense GLU feed-forward block.
struct FFNWeights {
  Value gate, up, down;
};

/// Weights of one MoE block.
struct MoeWeights {
  Value router;        ///< [E, n_embd]
  Value gate, up;      ///< [E, F, n_embd] each, or null when gateUp is set
  Value gateUp;        ///< [E, 2F, n_embd], per expert rows [gate; up]
  Value down;          ///< [E, n_embd, F]
  Value downScale;     ///< optional [E], multiplies each expert's output
  Value routerBias;    ///< optional [E], added to the router logits (gpt-oss)
  Value gateBias, upBias; ///< optional [E, F] per-expert biases (gpt-oss)
  Value gateUpBias;    ///< optional [E, 2F], per expert [gate; up] like gateUp (gpt-oss, merged form)
  Value downBias;      ///< optional [E, n_embd], added before the router weighting (gpt-oss)
};

/// How the router's logits become the selected experts' weights.
enum class MoeGating {
  Softmax,           ///< softmax over all experts, top-k of the probabilities, their probabilities
  SoftmaxNormalized, ///< as Softmax, the k probabilities renormalised to sum to 1
  SoftmaxSelected,   ///< top-k of the logits, softmax over the k selected logits only (gpt-oss)
};

class ModelBuilder {
public:
  ModelBuilder(OpBuilder &b, Location loc, const gguf::GGUFFile &file) : b(b), loc(loc), file(file) {
    b.setListener(&stamper);
  }
  ~ModelBuilder() { b.setListener(nullptr); }
  ModelBuilder(const ModelBuilder &) = delete;
  ModelBuilder &operator=(const ModelBuilder &) = delete;

  /// What the ops and weights created from now on belong to (see the file comment).
  void setLayer(unsigned il) { stamper.layer = b.getI64IntegerAttr(il); }
  void setOutputHead() { stamper.layer = b.getStringAttr(TpcDialect::kLayerOutputHead); }
  void clearLayer() { stamper.layer = {}; }

  /// The GGUF tensor `name` as a tpc.weight with logical shape `shape` (ggml ne reversed). On a missing
  /// tensor or another shape, emits an error naming both, and `why` (the keys the shape comes from), and
  /// returns null.
  Value weight(const std::string &name, ArrayRef<int64_t> shape, const std::string &why = "");
  /// As weight(), but an absent tensor returns null without an error.
  Value optionalWeight(const std::string &name, ArrayRef<int64_t> shape, const std::string &why = "");
  /// Emits an error (prefixed with the file name) and marks the import failed.
  void error(const Twine &message);
  bool failed() const { return hadError; }

  // One method per op; shapes are inferred by the ops.
  Value getRows(Value table, Value ids);
  Value takeAlong(Value x, Value ids);
  Value selectRows(Value x, Value rows);
  Value rmsNorm(Value x, float eps);
  Value matmul(Value x, Value w);
  Value mulMatId(Value x, Value w, Value ids);
  Value add(Value a, Value c);
  Value mul(Value a, Value c);
  Value div(Value a, Value c);
  Value scale(Value x, float s);
  Value glu(Value gate, Value up, GluFn fn);
  Value glu(Value gateUp, GluFn fn);
  Value softmax(Value x);
  Value topK(Value x, int64_t k);
  Value sum(Value x, int64_t axis, bool keepDim);
  Value reshape(Value x, ArrayRef<int64_t> shape);
  Value rope(Value x, Value pos, Value freqs, RopeMode mode, int64_t nDims, float base,
             const RopeScaling &scaling = {});
  Value softcap(Value x, float cap);
  Value kvCache(unsigned layer, int64_t nHeadKv, int64_t dk, int64_t dv);
  Value attention(Value q, Value k, Value v, Value cache, Value pos, float scale, int64_t window,
                  float softcap, Value gate = {}, Value sinks = {});
  Value addId(Value x, Value bias, Value ids);
  Value unary(Value x, UnaryFn fn);
  Value view(Value x, int64_t axis, int64_t offset, int64_t size);
  Value l2Norm(Value x, float eps);
  Value gatedRmsNorm(Value x, Value w, Value z, float eps);
  Value recurrentState(unsigned layer, int64_t nKeyHeads, int64_t nValueHeads, int64_t dk, int64_t dv,
                       int64_t convKernel);
  Value ssmConv(Value x, Value w, Value state, Value pos);
  Value deltaNet(Value q, Value k, Value v, Value g, Value beta, Value state, Value pos, float scale);

  /// x · w after RMS norm: rms_norm(x) * w.
  Value norm(Value x, Value w, float eps) { return mul(rmsNorm(x, eps), w); }

  /// Attention sub-block: projections, optional q/k/v norms, rope, attention, output projection.
  Value attentionBlock(Value h, Value pos, const AttentionWeights &w, const AttentionSpec &spec);
  /// Dense GLU feed-forward: down · (fn(gate · h) * (up · h)).
  Value gluFFN(Value h, const FFNWeights &w, GluFn fn);
  /// MoE feed-forward on `h` with the router reading `routerIn` (the same value for most architectures).
  Value moeFFN(Value h, Value routerIn, const MoeWeights &w, int64_t nUsed, GluFn fn, MoeGating gating);
  /// The expert half of moeFFN, for architectures that route their own way: the selected experts `ids`
  /// [T, k] applied to `h` (with the experts' biases, if any) and summed with the router weights `weights`
  /// [T, k].
  Value moeExperts(Value h, const MoeWeights &w, Value ids, Value weights, int64_t nUsed, GluFn fn);

  /// The output-row indices of @forward (its third argument): buildOutput gathers the last hidden state
  /// to them before the final norm.
  void setOutputRows(Value rows) { outputRows_ = rows; }
  Value outputRows() const { return outputRows_; }

  const gguf::GGUFFile &gguf() const { return file; }

private:
  /// Sets `tpc.layer` on every op the builder inserts.
  struct LayerStamper : OpBuilder::Listener {
    Attribute layer; ///< null: no stamp
    void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
      if (layer)
        op->setAttr(TpcDialect::kLayerAttrName, layer);
    }
  };

  Value makeWeight(const gguf::TensorInfo &t, ArrayRef<int64_t> shape, const std::string &why);

  /// Builds an op whose result type is inferred, without the builder's abort on a failed inference: the
  /// op is made with a placeholder type, then takes the inferred one; on failure (the inference has
  /// emitted why) it is erased, the import fails and the result is null. Null after an earlier error.
  template <typename OpT, typename... Args> Value make(Args &&...args) {
    if (hadError)
      return nullptr;
    OpT op = b.create<OpT>(loc, Type(RankedTensorType::get({}, b.getF32Type())), std::forward<Args>(args)...);
    SmallVector<Type, 1> types;
    if (mlir::failed(OpT::inferReturnTypes(b.getContext(), loc, op->getOperands(), op->getRawDictionaryAttrs(),
                                     op->getPropertiesStorage(), op->getRegions(), types))) {
      op->erase();
      error(Twine("cannot build '") + OpT::getOperationName() +
            "' from these hyperparameters (a tpc bug: the importer should have rejected them by name)");
      return nullptr;
    }
    op->getResult(0).setType(types.front());
    return op->getResult(0);
  }

  LayerStamper stamper;
  OpBuilder &b;
  Location loc;
  const gguf::GGUFFile &file;
  bool hadError = false;
  Value outputRows_;
};

} // namespace mlir::tpc

#endif // TPC_COMPILER_IMPORT_MODELBUILDER_H
