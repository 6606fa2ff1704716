#!/usr/bin/env python3
"""merge-gate-up.py IN.gguf OUT.gguf: rewrites a MoE GGUF with separate ffn_gate_exps / ffn_up_exps (and
their .bias) into the merged form newer converters write: ffn_gate_up_exps [n_embd, 2F, E] with per expert
rows [gate; up], and ffn_gate_up_exps.bias [2F, E] likewise. Same function, other tensor layout: the two
files must give the same logits. Stdlib only; keeps every key and the other tensors as they are."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type -> (elements, bytes) of a block, for the types the fixtures hold (F32, F16, Q8_0, MXFP4).
BLOCKS = {0: (1, 4), 1: (1, 2), 8: (32, 34), 39: (32, 17)}


def read_str(b, o):
    n = struct.unpack_from("<Q", b, o)[0]
    return b[o + 8:o + 8 + n].decode(), o + 8 + n


def skip_value(b, o, t):
    if t == 8:
        return read_str(b, o)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n):
            o = skip_value(b, o, et)
        return o
    return o + SIZES[t]


def main(src, dst):
    b = open(src, "rb").read()
    assert b[:4] == b"GGUF"
    _, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    o, align = 24, 32
    for _ in range(n_kv):
        k, o2 = read_str(b, o)
        t = struct.unpack_from("<I", b, o2)[0]
        if k == "general.alignment":
            align = struct.unpack_from("<I", b, o2 + 4)[0]
        o = skip_value(b, o2 + 4, t)
    kv_bytes = b[24:o]
    infos = []
    for _ in range(n_t):
        name, o = read_str(b, o)
        nd = struct.unpack_from("<I", b, o)[0]
        ne = list(struct.unpack_from("<%dQ" % nd, b, o + 4))
        o += 4 + 8 * nd
        typ, off = struct.unpack_from("<IQ", b, o)
        o += 12
        infos.append([name, ne, typ, off])
    data0 = (o + align - 1) // align * align
    def data(info):
        n = 1
        for d in info[1]:
            n *= d
        elems, size = BLOCKS[info[2]]
        return b[data0 + info[3]:data0 + info[3] + n // elems * size]
    by_name = {i[0]: i for i in infos}
    out = []  # (name, ne, type, bytes)
    for name, ne, typ, off in infos:
        for kind in ("ffn_up_exps.weight", "ffn_up_exps.bias"):
            if name.endswith(kind):
                break
        else:
            kind = None
        if kind:
            continue  # folded into the merged tensor
        if name.endswith("ffn_gate_exps.weight") or name.endswith("ffn_gate_exps.bias"):
            up = by_name[name.replace("ffn_gate_exps", "ffn_up_exps")]
            g, u = data(by_name[name]), data(up)
            experts = ne[-1]
            per_g, per_u = len(g) // experts, len(u) // experts
            merged = b"".join(g[e * per_g:(e + 1) * per_g] + u[e * per_u:(e + 1) * per_u] for e in range(experts))
            new_ne = list(ne)
            new_ne[-2 if name.endswith("weight") else 0] *= 2
            out.append((name.replace("ffn_gate_exps", "ffn_gate_up_exps"), new_ne, typ, merged))
            continue
        out.append((name, ne, typ, data([name, ne, typ, off])))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(out), n_kv) + kv_bytes
    offs, cur = [], 0
    for _, _, _, d in out:
        offs.append(cur)
        cur = (cur + len(d) + align - 1) // align * align
    for (name, ne, typ, _), off in zip(out, offs):
        nb = name.encode()
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", typ, off)
    head += b"\0" * ((-len(head)) % align)
    body = b""
    for _, _, _, d in out:
        body += d + b"\0" * ((-len(d)) % align)
    open(dst, "wb").write(head + body)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
