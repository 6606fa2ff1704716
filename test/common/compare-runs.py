"""Compares two `tpc run ... --greedy --dump-logits A.f32 > A.out` runs of one model in two variants (plans
for other device counts or placements, plans of older schemas): usage

    compare-runs.py A B --shape ROWSxVOCAB --tol TOL

A and B are prefixes: A.out holds the run's stdout (its "generated ids:" line), A.f32 its logits. Checks:
both runs generated the same, non-empty ids; both dumps hold exactly ROWS x VOCAB float32 values (the
prompt's rows and one per generated token), not all one value; every |a - b| <= TOL, counted element by element, so NaN (which
fails every `<=`) fails, and so do non-finite values in both. Prints RUNS-MATCH with the figures, or one
line saying what differs and exits 1. Expected values come from the other variant, never from a pasted
earlier run.
"""
import argparse
import array
import math
import sys


def fail(msg):
    sys.exit(f"compare-runs: {msg}")


def ids(prefix):
    try:
        # The streamed text before the ids may hold byte tokens that are not UTF-8 on their own.
        text = open(prefix + ".out", "rb").read().decode("utf-8", "replace")
    except OSError as e:
        fail(f"{prefix}.out: {e.strerror}")
    lines = [l for l in text.splitlines() if l.startswith("generated ids: ")]
    if len(lines) != 1:
        fail(f"{prefix}.out: {len(lines)} 'generated ids:' lines, expected 1")
    return [int(x) for x in lines[0].split(": ", 1)[1].split(",") if x]


def logits(prefix, count):
    a = array.array("f")
    try:
        with open(prefix + ".f32", "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{prefix}.f32: {e.strerror}")
    if len(data) != 4 * count:
        fail(f"{prefix}.f32: {len(data)} bytes, expected {count} float32 values ({4 * count} bytes)")
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


p = argparse.ArgumentParser()
p.add_argument("a")
p.add_argument("b")
p.add_argument("--shape", required=True, help="ROWSxVOCAB of each dump")
p.add_argument("--tol", type=float, required=True)
args = p.parse_args()
rows, vocab = (int(x) for x in args.shape.split("x"))

ia, ib = ids(args.a), ids(args.b)
if not ia:
    fail(f"{args.a}.out: no generated ids")
if ia != ib:
    fail(f"generated ids differ: {args.a}: {ia}, {args.b}: {ib}")
la, lb = logits(args.a, rows * vocab), logits(args.b, rows * vocab)
if not max(la) > min(la):  # a run that wrote one constant (zeros) everywhere computed nothing
    fail(f"{args.a}.f32: every logit is {la[0]}")
bad = [i for i, (x, y) in enumerate(zip(la, lb)) if not abs(x - y) <= args.tol]
if bad:
    i = bad[0]
    fail(f"{len(bad)} of {len(la)} logits differ by more than {args.tol}; first: row {i // vocab} id {i % vocab}: "
         f"{la[i]} vs {lb[i]}")
worst = max(abs(x - y) for x, y in zip(la, lb))
print(f"RUNS-MATCH {len(ia)} ids, {rows}x{vocab} logits, max|d|={worst:.3g} (tol {args.tol})")
