#!/usr/bin/env python3
"""Tables of a bench/gpu/run.sh call: python3 bench/gpu/summarize.py OUT_DIR (prints markdown). The
reference's rates are the median of its repetitions, tpc's the mean of its (after a warm-up call).

Reads OUT_DIR/ref-MODEL.json (llama-bench -o json), OUT_DIR/{new,base}-MODEL-dN.json (tpc run --bench --json),
OUT_DIR/serve.txt and OUT_DIR/gpu.txt; a missing or broken file shows as '-'."""
import json
import os
import statistics
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ref_ts(model, kind):
    """The reference's median repetition: its first pp512 repetition after llama-bench's warm-up still runs
    at a third of the others' rate on an H200, which the mean (avg_ts) would carry."""
    rows = load(f"ref-{model}.json") or []
    for r in rows:
        if (kind == "pp" and r.get("n_prompt") == 512 and r.get("n_gen") == 0) or \
                (kind == "tg" and r.get("n_gen") == 128 and r.get("n_prompt") == 0):
            samples = r.get("samples_ts") or []
            return statistics.median(samples) if samples else r.get("avg_ts")
    return None


def tpc_rows(which, model, d):
    return load(f"{which}-{model}-d{d}.json") or []


def tpc_ts(which, model, d, test):
    for r in tpc_rows(which, model, d):
        if r.get("test") == test and r.get("n_parallel", 1) in (0, 1) and not r.get("step_ms"):
            return r.get("avg_ts")
    return None


def f(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


try:
    print("GPU:", open(os.path.join(out, "gpu.txt")).read().strip().replace("\n", "; "))
except OSError:
    pass
print()
print("| model | devices | pp512 ref | pp512 base | pp512 new | new/ref | new/base | tg128 ref | tg128 base "
      "| tg128 new | new/ref | new/base |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for model in ("llama3-8b", "qwen3-30b-a3b"):
    rp, rt = ref_ts(model, "pp"), ref_ts(model, "tg")
    for d in (1, 2):
        bp, bt = tpc_ts("base", model, d, "pp512"), tpc_ts("base", model, d, "tg128")
        np_, nt = tpc_ts("new", model, d, "pp512"), tpc_ts("new", model, d, "tg128")
        print(f"| {model} Q4_K_M | {d} | {f(rp) if d == 1 else '-'} | {f(bp)} | {f(np_)} | {ratio(np_, rp)} | "
              f"{ratio(np_, bp)} | {f(rt) if d == 1 else '-'} | {f(bt)} | {f(nt)} | {ratio(nt, rt)} | {ratio(nt, bt)} |")
    n1, n2 = tpc_ts("new", model, 1, "tg128"), tpc_ts("new", model, 2, "tg128")
    p1, p2 = tpc_ts("new", model, 1, "pp512"), tpc_ts("new", model, 2, "pp512")
    print(f"| {model} devices=2/devices=1 (new) | | | | | pp {ratio(p2, p1)} | | | | | tg {ratio(n2, n1)} | |")

for model in ("llama3-8b", "qwen3-30b-a3b"):
    print()
    print(f"Batched decode, {model}, devices=1 (ms per step of P tokens, and against one token's step):")
    print("| P | base ms | base x1 | new ms | new x1 | base t/s | new t/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    steps = {}
    for which in ("base", "new"):
        for r in tpc_rows(which, model, 1):
            if r.get("step_ms"):
                steps[(which, r["n_parallel"])] = (r["step_ms"], r.get("avg_ts"))
    for p in (1, 2, 4, 8):
        b, n = steps.get(("base", p)), steps.get(("new", p))
        b1, n1 = steps.get(("base", 1)), steps.get(("new", 1))
        print(f"| {p} | {f(b and b[0], 2)} | {ratio(b and b[0], b1 and b1[0])} | {f(n and n[0], 2)} | "
              f"{ratio(n and n[0], n1 and n1[0])} | {f(b and b[1])} | {f(n and n[1])} |")

try:
    serve = open(os.path.join(out, "serve.txt")).read().strip()
    print()
    print("tpc serve --backend cuda -np 4, llama3-8b (bench/serve/serve_bench.py):")
    print(serve)
except OSError:
    pass

try:
    types = [line.split() for line in open(os.path.join(out, "types.txt")) if line.strip()]
except OSError:
    types = []
if types:
    print()
    print("Weight types, devices=1 (cut models: the first LAYERS layers of the preset; rates in t/s):")
    print("| model | type | layers | pp512 ref | pp512 tpc | tpc/ref | tg128 ref | tg128 tpc | tpc/ref |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, preset, wtype, layers in types:
        rp, rt = ref_ts(name, "pp"), ref_ts(name, "tg")
        np_, nt = tpc_ts("new", name, 1, "pp512"), tpc_ts("new", name, 1, "tg128")
        print(f"| {preset} | {wtype} | {layers} | {f(rp)} | {f(np_)} | {ratio(np_, rp)} | {f(rt)} | {f(nt)} | "
              f"{ratio(nt, rt)} |")
