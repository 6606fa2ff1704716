#!/usr/bin/env python3
"""Compares two `tpc run --dump-hidden` files layer by layer, to show where two runs part.

Usage: compare-hidden.py A B [--max-rel X]

A and B hold the residual-stream output of every layer for every evaluated token (format:
tools/tpc/HiddenDump.h), e.g. a plan on 1 and on 2 devices, or a plan and its --f32-reference pass, run on
the same tokens. Prints per layer the rows compared, max |A - B|, rms(A - B), max |A| and rel =
rms(A - B) / rms(A). With --max-rel X, exits 1 when a layer's rel exceeds X (the first such layer is where
the runs depart). Plain Python (no numpy), so it runs wherever tpc does.
"""
import math
import struct
import sys
from array import array


def read(path):
    """{layer: (width, [float rows concatenated over calls])}."""
    try:
        f = open(path, "rb")
    except OSError as e:
        sys.exit(f"compare-hidden: cannot read '{path}': {e.strerror}")
    with f:
        if f.read(8) != b"TPCHID01":
            sys.exit(f"compare-hidden: '{path}' is not a `tpc run --dump-hidden` file (magic TPCHID01)")
        layers = {}
        while True:
            head = f.read(16)
            if not head:
                return layers
            if len(head) != 16:
                sys.exit(f"compare-hidden: '{path}' ends inside a record header (truncated file?)")
            layer, _call, rows, width = struct.unpack("<4i", head)
            vals = array("f")
            try:
                vals.fromfile(f, rows * width)
            except EOFError:
                sys.exit(f"compare-hidden: '{path}' ends inside layer {layer}'s rows (truncated file?)")
            if sys.byteorder != "little":
                vals.byteswap()
            w, acc = layers.setdefault(layer, (width, array("f")))
            if w != width:
                sys.exit(f"compare-hidden: '{path}' layer {layer} has rows of {width} and of {w} values")
            acc.extend(vals)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    max_rel = None
    if "--max-rel" in argv:
        i = argv.index("--max-rel")
        if i + 1 >= len(argv):
            sys.exit("compare-hidden: --max-rel needs a number")
        max_rel = float(argv[i + 1])
        args.remove(argv[i + 1])
    if len(args) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    a, b = read(args[0]), read(args[1])
    if sorted(a) != sorted(b):
        sys.exit(f"compare-hidden: the files hold different layers ({sorted(a)} vs {sorted(b)})")
    print(f"{'layer':>5} {'rows':>6} {'max|d|':>11} {'rms(d)':>11} {'max|A|':>11} {'rel':>11}")
    worst = None
    for layer in sorted(a):
        (wa, va), (wb, vb) = a[layer], b[layer]
        if wa != wb:
            sys.exit(f"compare-hidden: layer {layer} has width {wa} in A and {wb} in B (not the same model?)")
        if len(va) != len(vb):
            sys.exit(f"compare-hidden: layer {layer} has {len(va) // wa} rows in A and {len(vb) // wb} in B "
                     "(run both on the same tokens)")
        n = len(va)
        dmax = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        drms = math.sqrt(sum((x - y) ** 2 for x, y in zip(va, vb)) / max(n, 1))
        arms = math.sqrt(sum(x * x for x in va) / max(n, 1))
        amax = max((abs(x) for x in va), default=0.0)
        rel = drms / arms if arms > 0 else 0.0
        print(f"{layer:>5} {n // wa:>6} {dmax:>11.4e} {drms:>11.4e} {amax:>11.4e} {rel:>11.4e}")
        if max_rel is not None and rel > max_rel and worst is None:
            worst = layer
    if worst is not None:
        print(f"compare-hidden: layer {worst} is the first with rel > {max_rel}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
