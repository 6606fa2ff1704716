#!/usr/bin/env python3
"""Writes the small GGUF files the import-error lit tests use (stdlib only; run by hand, outputs committed).

Each file is a valid GGUF that the reader accepts but the importer must reject with an error naming the
architecture, key or tensor at fault. The base model is a 1-layer llama with n_embd 32, 2 heads, vocab 8.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = s(key) + struct.pack("<I", vtype)
    if vtype == U32:
        return out + struct.pack("<I", value)
    if vtype == I32:
        return out + struct.pack("<i", value)
    if vtype == F32:
        return out + struct.pack("<f", value)
    if vtype == STR:
        return out + s(value)
    if vtype == ARR:  # (element type, list)
        et, items = value
        body = struct.pack("<IQ", et, len(items))
        for it in items:
            body += struct.pack("<I", it) if et == U32 else struct.pack("<?", it)
        return out + body
    raise ValueError(vtype)


def write(name, meta, tensors):
    """tensors: list of (name, ne) in f32."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for m in meta:
        head += kv(*m)
    offset, infos = 0, b""
    for tname, ne in tensors:
        infos += s(tname) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        infos += struct.pack("<IQ", 0, offset)
        n = 1
        for d in ne:
            n *= d
        offset += (n * 4 + 31) // 32 * 32
    data = head + infos
    data += b"\0" * ((32 - len(data) % 32) % 32)
    data += b"\0" * offset
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def llama_meta(arch="llama", extra=()):
    return [("general.architecture", STR, arch), (arch + ".block_count", U32, 1),
            (arch + ".embedding_length", U32, 32), (arch + ".feed_forward_length", U32, 64),
            (arch + ".attention.head_count", U32, 2), (arch + ".attention.head_count_kv", U32, 1),
            (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5)] + list(extra)


def with_key(meta, key, vtype, value):
    """meta with `key` replaced (or added) by a value of `vtype`."""
    return [m for m in meta if m[0] != key] + [(key, vtype, value)]


def llama_tensors(skip=(), override=None):
    t = [("token_embd.weight", [32, 8]), ("output_norm.weight", [32]),
         ("blk.0.attn_norm.weight", [32]), ("blk.0.attn_q.weight", [32, 32]),
         ("blk.0.attn_k.weight", [32, 16]), ("blk.0.attn_v.weight", [32, 16]),
         ("blk.0.attn_output.weight", [32, 32]), ("blk.0.ffn_norm.weight", [32]),
         ("blk.0.ffn_gate.weight", [32, 64]), ("blk.0.ffn_up.weight", [32, 64]),
         ("blk.0.ffn_down.weight", [64, 32])]
    t = [(n, (override or {}).get(n, ne)) for n, ne in t if n not in skip]
    return t


write("llama-ok.gguf", llama_meta(), llama_tensors())
write("unknown-arch.gguf", llama_meta("mamba"), llama_tensors())
write("missing-tensor.gguf", llama_meta(), llama_tensors(skip={"blk.0.ffn_up.weight"}))
write("wrong-shape.gguf", llama_meta(), llama_tensors(override={"blk.0.attn_k.weight": [32, 24]}))
write("missing-block-count.gguf", [m for m in llama_meta() if m[0] != "llama.block_count"], llama_tensors())
write("bad-head-count-kv.gguf",
      [m for m in llama_meta() if m[0] != "llama.attention.head_count_kv"] +
      [("llama.attention.head_count_kv", U32, 3)], llama_tensors())
write("missing-arch.gguf", llama_meta()[1:], llama_tensors())
write("qwen3moe-no-experts.gguf", llama_meta("qwen3moe"), llama_tensors())
write("kv-array-length.gguf",
      [m for m in llama_meta() if m[0] != "llama.attention.head_count_kv"] +
      [("llama.attention.head_count_kv", ARR, (U32, [1, 1]))], llama_tensors())
write("rope-dims-odd.gguf", llama_meta(extra=[("llama.rope.dimension_count", U32, 15)]), llama_tensors())

# One file per class of bad hyperparameter value: not finite, out of range, inconsistent with another key or
# with the tensor shapes. Each must be an error naming the key, its value and what is expected.
NAN, INF = float("nan"), float("inf")
write("eps-nan.gguf", with_key(llama_meta(), "llama.attention.layer_norm_rms_epsilon", F32, NAN), llama_tensors())
write("rope-base-negative.gguf", llama_meta(extra=[("llama.rope.freq_base", F32, -5.0)]), llama_tensors())
write("rope-base-inf.gguf", llama_meta(extra=[("llama.rope.freq_base", F32, INF)]), llama_tensors())
write("softcap-nan.gguf", llama_meta(extra=[("llama.final_logit_softcapping", F32, NAN)]), llama_tensors())
write("rope-dims-zero.gguf", llama_meta(extra=[("llama.rope.dimension_count", U32, 0)]), llama_tensors())
write("head-count-zero.gguf", with_key(llama_meta(), "llama.attention.head_count", U32, 0), llama_tensors())
write("context-length-zero.gguf", llama_meta(extra=[("llama.context_length", U32, 0)]), llama_tensors())
write("ffn-length-zero.gguf", with_key(llama_meta(), "llama.feed_forward_length", U32, 0), llama_tensors())
# 64 heads over a 32-wide embedding: the default head size embedding_length / head_count is 0.
write("head-dim-zero.gguf", with_key(with_key(llama_meta(), "llama.attention.head_count", U32, 64),
                                     "llama.attention.head_count_kv", U32, 64), llama_tensors())
# key_length 8 x 2 heads = 16 rows, but attn_q has 32: the error names the keys the shape comes from.
write("key-length-mismatch.gguf", llama_meta(extra=[("llama.attention.key_length", U32, 8)]), llama_tensors())
write("expert-used-too-many.gguf", llama_meta("qwen3moe", extra=[
    ("qwen3moe.expert_count", U32, 4), ("qwen3moe.expert_used_count", U32, 8),
    ("qwen3moe.expert_feed_forward_length", U32, 16)]), llama_tensors())
# gemma3's sliding layers need a window: absent (0) and negative.
write("sliding-window-zero.gguf", llama_meta("gemma3"), llama_tensors())
write("sliding-window-negative.gguf", llama_meta("gemma3", extra=[("gemma3.attention.sliding_window", I32, -1)]),
      llama_tensors())
# gemma4: more rotated dims on the sliding layers than their head size.
write("gemma4-rope-dims-swa.gguf", llama_meta("gemma4", extra=[
    ("gemma4.expert_count", U32, 4), ("gemma4.expert_used_count", U32, 2),
    ("gemma4.expert_feed_forward_length", U32, 16), ("gemma4.attention.key_length_swa", U32, 16),
    ("gemma4.rope.dimension_count_swa", U32, 32)]), llama_tensors())
# glm4moe: an unknown expert_gating_func; dense leading layers without feed_forward_length; a layer without
# its q bias (the biases are required, as in the reference engine).
def glm_meta(extra=()):
    meta = [m for m in llama_meta("glm4moe") if m[0] != "glm4moe.feed_forward_length"]
    return meta + [("glm4moe.expert_count", U32, 4), ("glm4moe.expert_used_count", U32, 2),
                   ("glm4moe.expert_feed_forward_length", U32, 16), ("glm4moe.expert_shared_count", U32, 1),
                   ("glm4moe.leading_dense_block_count", U32, 1)] + list(extra)


glm_tensors = [t for t in llama_tensors() if t[0] != "blk.0.ffn_norm.weight"] + [
    ("blk.0.attn_k.bias", [16]), ("blk.0.attn_v.bias", [16]), ("blk.0.post_attention_norm.weight", [32])]
write("glm4moe-gating-func.gguf", glm_meta([("glm4moe.feed_forward_length", U32, 64),
                                            ("glm4moe.expert_gating_func", U32, 3)]), glm_tensors)
write("glm4moe-dense-no-ffn.gguf", glm_meta(), glm_tensors)
write("glm4moe-missing-bias.gguf", glm_meta([("glm4moe.feed_forward_length", U32, 64)]), glm_tensors)

# rope.scaling: a type tpc does not implement is refused by name, not run unscaled; a negative factor.
write("rope-scaling-longrope.gguf", llama_meta(extra=[("llama.rope.scaling.type", STR, "longrope")]), llama_tensors())
write("rope-scaling-factor-negative.gguf", llama_meta(extra=[("llama.rope.scaling.type", STR, "yarn"),
                                                              ("llama.rope.scaling.factor", F32, -2.0)]),
      llama_tensors())
