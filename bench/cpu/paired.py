#!/usr/bin/env python3
"""Paired, interleaved CPU benchmark of `tpc run --bench` against the reference engine's llama-bench.

On a shared machine the load changes from minute to minute, so numbers from separate runs are not
comparable. This runs, for each model, N rounds of "tpc, reference" back to back (rotating which goes
first), each a single repetition of pp and tg, and reports per round the ratio tpc / reference, then the
median and the range of the ratios, with the load average before each round. With --base, an older tpc
build runs in every round too (before/after in one run; it needs no compiler: the plans come from --tpc).

Usage: bench/cpu/paired.py --tpc build/bin/tpc --ref /work/ik/build/bin/llama-bench [--base OLD/tpc] \
           [--pairs 3] [--pp 512] [--tg 128] [--threads 2] [--out DIR] MODEL.gguf...
Each model is compiled once for 1 device (`tpc compile --devices 1`). Extra reference flags: --ref-args.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_tpc(tpc, plan, pp, tg, threads):
    out = subprocess.run([tpc, "run", plan, "--bench", "-pp", str(pp), "-tg", str(tg), "-t", str(threads),
                          "-r", "1", "--json"], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out[out.index("["):])
    return {r["test"]: r["avg_ts"] for r in rows}


def run_ref(ref, model, pp, tg, threads, extra):
    out = subprocess.run([ref, "-m", model, "-p", str(pp), "-n", str(tg), "-t", str(threads), "-r", "1",
                          "-o", "json"] + extra, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out[out.index("["):])
    res = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        res[test] = r["avg_ts"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpc", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--base", default=None, help="an older tpc to run in every round as well")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="folder for the plans (default: a temp folder)")
    ap.add_argument("--ref-args", default="", help="extra llama-bench arguments, space separated")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tpc-paired-")
    extra = a.ref_args.split()
    tests = [f"pp{a.pp}", f"tg{a.tg}"]
    engines = ["tpc"] + (["base"] if a.base else []) + ["ref"]
    mine = [e for e in engines if e != "ref"]
    head = " | ".join(f"{t} {e}" for t in tests for e in engines)
    head += " | " + " | ".join(f"{t} {e}/ref" for t in tests for e in mine)
    print(f"| model | round | load | {head} |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in range(len(tests) * (len(engines) + len(mine)))) + " |")
    summary = []
    for model in a.models:
        name = os.path.basename(model).removesuffix(".gguf")
        plan = os.path.join(out, name + ".plan")
        subprocess.run([a.tpc, "compile", model, "--devices", "1", "-o", plan], check=True, capture_output=True)
        ratios = {(t, e): [] for t in tests for e in mine}
        for i in range(a.pairs):
            ld = load()
            res = {}
            for j in range(len(engines)):
                e = engines[(i + j) % len(engines)]
                if e == "ref":
                    res[e] = run_ref(a.ref, model, a.pp, a.tg, a.threads, extra)
                else:
                    res[e] = run_tpc(a.tpc if e == "tpc" else a.base, plan, a.pp, a.tg, a.threads)
            cells = [f"{res[e][t]:.2f}" for t in tests for e in engines]
            for t in tests:
                for e in mine:
                    r = res[e][t] / res["ref"][t]
                    ratios[(t, e)].append(r)
                    cells.append(f"{r:.2f}")
            print(f"| {name} | {i + 1} | {ld:.1f} | " + " | ".join(cells) + " |", flush=True)
        summary.append((name, {k: (statistics.median(v), min(v), max(v)) for k, v in ratios.items()}))
    print()
    keys = [(t, e) for t in tests for e in mine]
    print("| model | " + " | ".join(f"{t} {e}/ref median (min-max)" for t, e in keys) + " |")
    print("| --- | " + " | ".join("---:" for _ in keys) + " |")
    for name, s in summary:
        print(f"| {name} | " + " | ".join("{:.2f} ({:.2f}-{:.2f})".format(*s[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
