#!/usr/bin/env python3
"""Writes the malformed-GGUF corpus (test/gguf/malformed/*.gguf + cases.txt) and the demo model
(examples/models/tiny-demo.gguf). Standard library only; run by hand from anywhere:

    python3 test/gguf/malformed/generate.py

Each malformed file starts from a small valid GGUF and breaks exactly one thing, so the reader's error
for it is specific. cases.txt maps each file to a substring of the one-line error the reader must give;
the tests check every substring matches and that no two cases share one. The output is deterministic.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# GGUF value type ids.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
              U64: "<Q", I64: "<q", F64: "<d"}
# ggml type ids and (block elements, block bytes).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    """Encodes a value of type t (without the type tag). Arrays: v = (elem_type, [elements])."""
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, elems = v
        return struct.pack("<IQ", et, len(elems)) + b"".join(value(et, e) for e in elems)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    return gstr(key) + struct.pack("<I", t) + value(t, v)


def tinfo(name, ne, ggml_type, offset):
    return gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + \
        struct.pack("<IQ", ggml_type, offset)


def nbytes(ne, ggml_type):
    if not ne or ggml_type not in BLOCK:  # malformed infos: no data of their own
        return 0
    be, bb = BLOCK[ggml_type]
    n = 1
    for d in ne[1:]:
        n *= d
    return ne[0] // be * bb * n


def align(n, a):
    return (n + a - 1) // a * a


def gguf(kvs, tensors, version=3, alignment=32, magic=b"GGUF", tensor_count=None, kv_count=None,
         data=None):
    """kvs: list of encoded key/values; tensors: list of (name, ne, type, offset or None=packed).
    Returns the file bytes; tensor data is a deterministic byte pattern unless `data` is given."""
    infos = b""
    off = 0
    ends = 0
    for name, ne, t, o in tensors:
        if o is None:
            o = align(off, alignment)
        infos += tinfo(name, ne, t, o)
        off = o + nbytes(ne, t)
        ends = max(ends, off)
    head = magic + struct.pack("<IQQ", version, len(tensors) if tensor_count is None else tensor_count,
                               len(kvs) if kv_count is None else kv_count)
    head += b"".join(kvs) + infos
    if not tensors:
        return head
    pad = align(len(head), alignment) - len(head)
    if data is None:
        data = bytes((i * 7 + 3) & 0xFF for i in range(align(ends, alignment)))
    return head + b"\0" * pad + data


BASE_KVS = [kv("general.architecture", STR, "llama"), kv("llama.block_count", U32, 1)]
EMB = ("token_embd.weight", [8, 4], GGML_F32, None)
OUT = ("output.weight", [8, 4], GGML_F32, None)


def base(**kw):
    kw.setdefault("kvs", BASE_KVS)
    kw.setdefault("tensors", [EMB, OUT])
    kvs = kw.pop("kvs")
    tensors = kw.pop("tensors")
    return gguf(kvs, tensors, **kw)


def nested(depth):
    """An array nested `depth` levels deep (depth 1 = array of uint8)."""
    v = (U8, [1, 2])
    for _ in range(depth - 1):
        v = (ARR, [v])
    return v


def cases():
    """(file name, bytes, expected error substring)."""
    good = base()
    header_len = 24
    key0 = header_len  # offset of metadata[0]
    out = []
    out.append(("bad-magic.gguf", base(magic=b"GGML"), "not a GGUF file"))
    out.append(("short-magic.gguf", b"GG", "magic: unexpected end of file"))
    out.append(("version-1.gguf", base(version=1), "unsupported GGUF version 1 ("))
    out.append(("version-4.gguf", base(version=4), "unsupported GGUF version 4 ("))
    out.append(("big-endian.gguf", b"GGUF" + struct.pack(">I", 3) + good[8:], "a big-endian file?"))
    out.append(("truncated-header.gguf", good[:12], "tensor_count: unexpected end of file"))
    # metadata[0] key "general.architecture" (20 bytes): cut 5 bytes into it.
    # (No tensors, so the header's count plausibility check passes and the cut key is what fails.)
    one_kv = gguf(BASE_KVS[:1], [])
    out.append(("truncated-key.gguf", one_kv[:key0 + 8 + 5], "metadata[0].key: string length 20 exceeds"))
    # Cut inside the uint32 value of llama.block_count (the second key/value).
    kv1 = key0 + len(BASE_KVS[0])
    cut = kv1 + 8 + len("llama.block_count") + 4 + 2
    out.append(("truncated-value.gguf", good[:cut], "metadata 'llama.block_count': unexpected end of file"))
    ti0 = kv1 + len(BASE_KVS[1])
    cut = ti0 + 8 + len("token_embd.weight") + 4 + 8 + 3  # inside ne[1]
    out.append(("truncated-tensor-info.gguf", good[:cut], "tensor 'token_embd.weight' ne[1]: unexpected end"))
    out.append(("truncated-tensor-data.gguf", good[:-40], "run past the end of the file (truncated?"))
    head_len = ti0 + len(tinfo(EMB[0], EMB[1], EMB[2], 0)) + len(tinfo(OUT[0], OUT[1], OUT[2], 0))
    assert head_len % 32 != 0  # so the data section starts past the cut
    out.append(("truncated-after-infos.gguf", good[:head_len], "truncated after the tensor infos"))
    out.append(("string-length-eof.gguf",
                base(kvs=BASE_KVS + [gstr("general.name") + struct.pack("<IQ", STR, 1 << 40) + b"abc"]),
                "metadata 'general.name': string length 1099511627776 exceeds the"))
    out.append(("array-length-eof.gguf",
                base(kvs=BASE_KVS + [gstr("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, U32, 1000000)]),
                "array length 1000000 of uint32 needs at least 4 bytes per element"))
    out.append(("absurd-metadata-count.gguf", base(kv_count=4000000000), "4000000000 key/value pairs cannot fit"))
    out.append(("absurd-tensor-count.gguf", base(tensor_count=4000000000),
                "tensor_count: 4000000000 tensors cannot fit in a"))
    out.append(("ndims-0.gguf", base(tensors=[("token_embd.weight", [], GGML_F32, 0)]),
                "n_dims 0 is not between 1 and 4"))
    out.append(("ndims-5.gguf", base(tensors=[("token_embd.weight", [8, 1, 1, 1, 1], GGML_F32, None)]),
                "n_dims 5 is not between 1 and 4"))
    out.append(("dim-zero.gguf", base(tensors=[("token_embd.weight", [8, 0], GGML_F32, 0)]),
                "dimension ne[1] is 0"))
    out.append(("dim-product-overflow.gguf",
                base(tensors=[("token_embd.weight", [1 << 32, 1 << 32], GGML_F32, 0)], data=b"\0" * 64),
                "has more than 2^63-1 elements (int64 overflow)"))
    out.append(("byte-size-overflow.gguf",
                base(tensors=[("token_embd.weight", [1 << 31, 1 << 31], GGML_F32, 0)], data=b"\0" * 64),
                "byte size of shape [2147483648, 2147483648] overflows uint64"))
    out.append(("offset-past-eof.gguf", base(tensors=[EMB, ("output.weight", [8, 4], GGML_F32, 1 << 20)],
                                             data=b"\0" * 256), "is past the end of the file (data section holds"))
    out.append(("misaligned-offset.gguf", base(tensors=[EMB, ("output.weight", [8, 4], GGML_F32, 144)]),
                "data offset 144 is not a multiple of the alignment 32"))
    out.append(("overlapping-tensors.gguf", base(tensors=[EMB, ("output.weight", [8, 4], GGML_F32, 96)]),
                "overlaps tensor 'token_embd.weight'"))
    out.append(("duplicate-tensor.gguf", base(tensors=[EMB, ("token_embd.weight", [8, 4], GGML_F32, None)]),
                "duplicate tensor name 'token_embd.weight'"))
    out.append(("duplicate-key.gguf", base(kvs=BASE_KVS + [kv("general.architecture", STR, "qwen3")]),
                "duplicate metadata key 'general.architecture'"))
    out.append(("unknown-value-type.gguf",
                base(kvs=BASE_KVS + [gstr("general.weird") + struct.pack("<I", 13) + b"\0" * 8]),
                "unknown metadata value type 13"))
    out.append(("unknown-array-type.gguf",
                base(kvs=BASE_KVS + [gstr("general.weird") + struct.pack("<IIQ", ARR, 77, 1) + b"\0" * 8]),
                "unknown array element type 77"))
    out.append(("unknown-tensor-type.gguf", base(tensors=[EMB, ("output.weight", [8, 4], 4, 128)]),
                "tensor 'output.weight': unknown ggml tensor type 4"))
    out.append(("alignment-not-pow2.gguf",
                base(kvs=BASE_KVS + [kv("general.alignment", U32, 48)], alignment=48),
                "alignment 48 is not a power of two"))
    out.append(("alignment-zero.gguf", base(kvs=BASE_KVS + [kv("general.alignment", U32, 0)]),
                "alignment is 0; it must be a power of two"))
    out.append(("alignment-too-big.gguf", base(kvs=BASE_KVS + [kv("general.alignment", U64, 1 << 40)]),
                "alignment 1099511627776 does not fit in uint32"))
    out.append(("alignment-string.gguf", base(kvs=BASE_KVS + [kv("general.alignment", STR, "32")]),
                "general.alignment: has type string, expected an unsigned integer"))
    out.append(("nested-too-deep.gguf", base(kvs=BASE_KVS + [kv("general.nested", ARR, nested(9))]),
                "arrays nested deeper than 8 levels"))
    out.append(("row-not-whole-blocks.gguf",
                base(tensors=[("token_embd.weight", [100, 2], GGML_Q4_0, 0)], data=b"\0" * 128),
                "row of 100 elements is not a whole number of q4_0 blocks (32 elements each)"))
    out.append(("bool-not-0-or-1.gguf", base(kvs=BASE_KVS + [kv("tokenizer.ggml.add_bos_token", BOOL, 2)]),
                "bool value 2 is not 0 or 1"))
    out.append(("tensor-name-too-long.gguf", base(tensors=[("x" * 64, [8, 4], GGML_F32, None)]),
                "tensor name of 64 bytes is too long (ggml allows at most 63)"))
    out.append(("tensor-name-empty.gguf", base(tensors=[EMB, ("", [8, 4], GGML_F32, None)]), "tensor name is empty"))
    out.append(("empty.gguf", b"", "the file is empty"))
    return out


def f16(x):
    return struct.pack("<e", x)


def q8_0(values):
    """ggml block_q8_0: f16 scale d = max|x| / 127, then 32 int8 quants."""
    out = b""
    for i in range(0, len(values), 32):
        blk = values[i:i + 32]
        amax = max(abs(v) for v in blk)
        d = amax / 127.0
        inv = 1.0 / d if d else 0.0
        out += f16(d) + struct.pack("<32b", *[max(-127, min(127, round(v * inv))) for v in blk])
    return out


def demo_model():
    """A complete one-layer llama (n_embd 32, 4 heads, 2 KV heads, n_ff 64, 16 tokens): F32 norms,
    Q8_0 matrices, deterministic pseudo-random weights."""
    n_embd, n_head, n_kv, n_ff, n_vocab, hd = 32, 4, 2, 64, 16, 8
    state = [12345]

    def rnd(n, scale):
        vals = []
        for _ in range(n):
            state[0] = (state[0] * 1103515245 + 12345) & 0x7FFFFFFF
            vals.append((state[0] / 0x7FFFFFFF * 2 - 1) * scale)
        return vals

    tokens = ["<unk>", "<s>", "</s>", "\u2581the", "\u2581a", "\u2581once", "\u2581upon", "\u2581time",
              "\u2581there", "\u2581was", "\u2581cat", "\u2581dog", "s", "e", "t", "."]
    kvs = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, "tiny-demo"),
        kv("general.file_type", U32, 7),
        kv("general.quantization_version", U32, 2),
        kv("llama.context_length", U32, 128),
        kv("llama.embedding_length", U32, n_embd),
        kv("llama.block_count", U32, 1),
        kv("llama.feed_forward_length", U32, n_ff),
        kv("llama.attention.head_count", U32, n_head),
        kv("llama.attention.head_count_kv", U32, n_kv),
        kv("llama.rope.dimension_count", U32, hd),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("llama.vocab_size", U32, n_vocab),
        kv("tokenizer.ggml.model", STR, "llama"),
        kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        kv("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0] + [-float(i) for i in range(n_vocab - 3)])),
        kv("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (n_vocab - 3))),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
        kv("tokenizer.ggml.add_bos_token", BOOL, 1),
        kv("tokenizer.ggml.add_eos_token", BOOL, 0),
    ]
    specs = [("token_embd.weight", [n_embd, n_vocab], GGML_Q8_0, 1.0),
             ("blk.0.attn_norm.weight", [n_embd], GGML_F32, None),
             ("blk.0.attn_q.weight", [n_embd, n_head * hd], GGML_Q8_0, n_embd ** -0.5),
             ("blk.0.attn_k.weight", [n_embd, n_kv * hd], GGML_Q8_0, n_embd ** -0.5),
             ("blk.0.attn_v.weight", [n_embd, n_kv * hd], GGML_Q8_0, n_embd ** -0.5),
             ("blk.0.attn_output.weight", [n_head * hd, n_embd], GGML_Q8_0, (n_head * hd) ** -0.5),
             ("blk.0.ffn_norm.weight", [n_embd], GGML_F32, None),
             ("blk.0.ffn_gate.weight", [n_embd, n_ff], GGML_Q8_0, n_embd ** -0.5),
             ("blk.0.ffn_up.weight", [n_embd, n_ff], GGML_Q8_0, n_embd ** -0.5),
             ("blk.0.ffn_down.weight", [n_ff, n_embd], GGML_Q8_0, n_ff ** -0.5),
             ("output_norm.weight", [n_embd], GGML_F32, None),
             ("output.weight", [n_embd, n_vocab], GGML_Q8_0, n_embd ** -0.5)]
    tensors = []
    data = b""
    for name, ne, t, scale in specs:
        n = 1
        for d in ne:
            n *= d
        if scale is None:  # norm weights: 1 + small noise
            blob = struct.pack("<%df" % n, *[1.0 + v for v in rnd(n, 0.1)])
        else:
            blob = q8_0(rnd(n, scale * 1.7))
        assert len(blob) == nbytes(ne, t)
        off = align(len(data), 32)
        data += b"\0" * (off - len(data)) + blob
        tensors.append((name, ne, t, off))
    data += b"\0" * (align(len(data), 32) - len(data))
    return gguf(kvs, tensors, data=data)


def main():
    all_cases = cases()
    subs = [s for _, _, s in all_cases]
    assert len(set(subs)) == len(subs), "two cases share an expected error"
    for a in subs:
        for b in subs:
            assert a == b or a not in b, f"'{a}' is a substring of '{b}'"
    for old in os.listdir(HERE):
        if old.endswith(".gguf"):
            os.remove(os.path.join(HERE, old))
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        f.write("# file<TAB>expected error substring; written by generate.py\n")
        for name, blob, sub in all_cases:
            with open(os.path.join(HERE, name), "wb") as g:
                g.write(blob)
            f.write(f"{name}\t{sub}\n")
    demo = os.path.join(ROOT, "examples", "models", "tiny-demo.gguf")
    os.makedirs(os.path.dirname(demo), exist_ok=True)
    with open(demo, "wb") as g:
        g.write(demo_model())
    print(f"wrote {len(all_cases)} malformed files and {os.path.relpath(demo, ROOT)}")


if __name__ == "__main__":
    main()
