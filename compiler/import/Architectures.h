//===- Architectures.h - per-architecture importers (internal) ----*- C++ -*-===//
//
// One function per architecture family, each in its own file. Each reads its architecture-specific
// hyperparameters, loads and checks every weight of a layer before building it, and returns the logits.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_IMPORT_ARCHITECTURES_H
#define TPC_COMPILER_IMPORT_ARCHITECTURES_H

#include "compiler/import/ModelBuilder.h"

namespace mlir::tpc {

/// Builds the body of @forward; returns the logits value or null after emitting an error.
using ArchBuildFn = Value (*)(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);

Value buildLlama(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);
Value buildQwen3(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);   // qwen3 and qwen3moe
Value buildGemma3(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);
Value buildGemma4(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);
Value buildQwen35(ModelBuilder &mb, HParams &hp, Value tokens, Value pos); // qwen35 and qwen35moe
Value buildGlm4Moe(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);
Value buildGptOss(ModelBuilder &mb, HParams &hp, Value tokens, Value pos);

/// Shared tail: final norm and output projection (tied to token_embd when output.weight is absent); what
/// the builder makes from here on is stamped as the output head.
Value buildOutput(ModelBuilder &mb, const HParams &hp, Value x, Value tokenEmbd);

/// The Q/K/V/O projections of layer `il` (head dims Dk, Dv); with `vOptional` an absent attn_v is null.
AttentionWeights loadAttention(ModelBuilder &mb, const HParams &hp, unsigned il, int64_t Dk, int64_t Dv,
                               bool vOptional = false);

/// The Q/K/V projection biases of layer `il` into `w` (required: glm4moe, gpt-oss), and attn_output's with
/// `withOutput` (gpt-oss); shape mismatches name the head keys.
void loadAttentionBiases(ModelBuilder &mb, const HParams &hp, unsigned il, int64_t Dk, int64_t Dv,
                         AttentionWeights &w, bool withOutput);

/// The routed experts of layer `il` (router, separate or merged gate/up, down; expert_count experts of
/// expert_feed_forward_length).
MoeWeights loadMoe(ModelBuilder &mb, const HParams &hp, unsigned il);

/// The dense FFN's gate, up and down projections of layer `il` (feed_forward_length wide).
FFNWeights loadFFN(ModelBuilder &mb, const HParams &hp, unsigned il);

/// The attention fields every architecture derives the same way: layer, heads, head dims, RoPE dims/base
/// from hp, eps, and scale 1/sqrt(Dk). Architectures override what differs (window, norms, scale).
AttentionSpec baseAttentionSpec(const HParams &hp, unsigned il, int64_t Dk, int64_t Dv, RopeMode mode);

/// Layer tensor name "blk.<il>.<suffix>".
inline std::string blk(unsigned il, const char *suffix) { return "blk." + std::to_string(il) + "." + suffix; }

} // namespace mlir::tpc

#endif // TPC_COMPILER_IMPORT_ARCHITECTURES_H
