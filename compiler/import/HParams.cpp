//===- HParams.cpp - model hyperparameters from GGUF metadata ---------------===//
#include "compiler/import/HParams.h"

namespace mlir::tpc {

::tpc::Expected<HParams> readCommonHParams(const gguf::GGUFFile &file, const std::string &arch) {
  HParams hp;
  hp.arch = arch;
  auto key = [&](const char *k) { return arch + "." + k; };
#define TPC_READ(dst, expr)                                                                               \
  {                                                                                                       \
    auto v = (expr);                                                                                      \
    if (!v)                                                                                               \
      return ::tpc::Error{v.message()};                                                              \
    dst = *v;                                                                                             \
  }
  TPC_READ(hp.nLayer, file.getU32(key("block_count")));
  TPC_READ(hp.nEmbd, file.getU32(key("embedding_length")));
  TPC_READ(hp.nHead, file.getU32(key("attention.head_count")));
  TPC_READ(hp.nCtxTrain, file.getU32Or(key("context_length"), 4096));
  TPC_READ(hp.nFF, file.getU32Or(key("feed_forward_length"), 0));
  TPC_READ(hp.rmsEps, file.getF32Or(key("attention.layer_norm_rms_epsilon"), 1e-5f));
  TPC_READ(hp.ropeBase, file.getF32Or(key("rope.freq_base"), 10000.f));
  TPC_READ(hp.nExpert, file.getU32Or(key("expert_count"), 0));
  TPC_READ(hp.nExpertUsed, file.getU32Or(key("expert_used_count"), 0));
  TPC_READ(hp.nFFExp, file.getU32Or(key("expert_feed_forward_length"), 0));
  TPC_READ(hp.slidingWindow, file.getU32Or(key("attention.sliding_window"), 0));
  TPC_READ(hp.finalSoftcap, file.getF32Or(key("final_logit_softcapping"), 0.f));
  if (hp.nLayer == 0 || hp.nLayer > 4096)
    return ::tpc::Error{file.path() + ": " + key("block_count") + " = " + std::to_string(hp.nLayer) +
                       " is out of range (1..4096)"};
  if (hp.nHead == 0 || hp.nEmbd == 0)
    return ::tpc::Error{file.path() + ": " + key("attention.head_count") + " and " + key("embedding_length") +
                       " must be positive"};

  // head_count_kv: a scalar (all layers) or an array with one entry per layer; absent means MHA.
  std::string kvKey = key("attention.head_count_kv");
  if (const gguf::Value *v = file.find(kvKey); v && v->type() == gguf::ValueType::Array) {
    TPC_READ(hp.nHeadKv, file.getU32Array(kvKey));
    if (hp.nHeadKv.size() != hp.nLayer)
      return ::tpc::Error{file.path() + ": " + kvKey + " has " + std::to_string(hp.nHeadKv.size()) +
                         " entries, expected one per layer (" + std::to_string(hp.nLayer) + ")"};
  } else {
    uint32_t n = 0;
    TPC_READ(n, file.getU32Or(kvKey, hp.nHead));
    hp.nHeadKv.assign(hp.nLayer, n);
  }
  for (unsigned il = 0; il < hp.nLayer; ++il)
    if (hp.nHeadKv[il] == 0 || hp.nHead % hp.nHeadKv[il] != 0)
      return ::tpc::Error{file.path() + ": layer " + std::to_string(il) + ": head_count " +
                         std::to_string(hp.nHead) + " is not a multiple of head_count_kv " +
                         std::to_string(hp.nHeadKv[il])};

  uint32_t defHead = hp.nEmbd / hp.nHead;
  TPC_READ(hp.headDimK, file.getU32Or(key("attention.key_length"), defHead));
  TPC_READ(hp.headDimV, file.getU32Or(key("attention.value_length"), hp.headDimK));
  TPC_READ(hp.nRot, file.getU32Or(key("rope.dimension_count"), hp.headDimK));
  if (hp.nRot > hp.headDimK || hp.nRot % 2 != 0)
    return ::tpc::Error{file.path() + ": " + key("rope.dimension_count") + " = " + std::to_string(hp.nRot) +
                       " must be even and at most the head dimension " + std::to_string(hp.headDimK)};
  hp.swaLayers.assign(hp.nLayer, false);
#undef TPC_READ
  return hp;
}

} // namespace mlir::tpc
