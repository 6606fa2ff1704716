#!/usr/bin/env python3
"""The body of bench/compare.sh: tpc (devices=1 and devices=2) against the reference engine, paired.

For each model: compile one plan per device count, then ROUNDS rounds; a round runs every engine once
(single repetition, each engine's own warm-up), the order rotating from round to round so no engine
always runs first on a machine whose load drifts. Ratios are taken within a round (tpc / reference and
devices=2 / devices=1), then summarised as median (min-max) over the rounds. The header names the CPU,
its SIMD flags and the load average before and after. Runner helpers (load, run_tpc, run_ref) come from
bench/cpu/paired.py so both scripts read the engines' JSON the same way.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu"))
from paired import load, run_ref, run_tpc  # noqa: E402


def cpu_header():
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown CPU":
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = sorted(f for f in flags if f.startswith("avx") or f in ("fma", "f16c"))
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return name, isa, simd


def tpc_has_depth(tpc):
    out = subprocess.run([tpc, "run", "--help"], capture_output=True, text=True).stdout
    return "--depth" in out


def run_tpc_depth(tpc, plan, depth, tg, threads):
    out = subprocess.run([tpc, "run", plan, "--bench", "-pp", "0", "-tg", str(tg), "--depth", str(depth),
                          "-c", str(depth + tg + 16), "-t", str(threads), "-r", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    rows = json.loads(out[out.index("["):])
    return {f"tg{tg}@d{depth}": rows[0]["avg_ts"]}


def run_ref_depth(ref, model, depth, tg, threads, extra):
    out = subprocess.run([ref, "-m", model, "-p", "0", "-n", "0", "-gp", f"{depth},{tg}", "-t", str(threads),
                          "-r", "1", "-o", "json"] + extra, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out[out.index("["):])
    return {f"tg{tg}@d{depth}": rows[-1]["avg_ts"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpc", required=True)
    ap.add_argument("--ref", required=True, help="the reference's llama-bench")
    ap.add_argument("--base", default=None, help="an older tpc run in the same rounds (before/after)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--depth", type=int, default=4096, help="context for the tg-at-depth test (0 = off)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--devices", default="1,2", help="tpc device counts, comma separated")
    ap.add_argument("--out", default=None, help="folder for the plans (default: a temp folder)")
    ap.add_argument("--ref-args", default="", help="extra llama-bench arguments, space separated")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tpc-compare-")
    extra = a.ref_args.split()
    devices = [int(d) for d in a.devices.split(",")]
    depth = a.depth if a.depth > 0 and tpc_has_depth(a.tpc) else 0
    tests = [f"pp{a.pp}", f"tg{a.tg}"] + ([f"tg{a.tg}@d{depth}"] if depth else [])
    engines = [f"d{d}" for d in devices] + ([f"base-d{d}" for d in devices] if a.base else []) + ["ref"]

    name, isa, simd = cpu_header()
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short",
                             "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# tpc vs reference, {isa}: {name}, {os.cpu_count()} cores, {a.threads} threads")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, tpc {commit or '?'} ({a.tpc}), "
          f"reference {a.ref}, host {platform.node()}" + (f", base (before) {a.base}" if a.base else ""))
    print(f"# SIMD flags: {' '.join(simd) or 'none'}")
    print(f"# {a.rounds} paired rounds per model, order rotating; load average before: {load():.2f}")
    if not depth:
        print("# tg at depth: skipped (`tpc run --help` has no --depth)" if a.depth else "# tg at depth: off")
    print()

    summary = []
    for model in a.models:
        mname = os.path.basename(model).removesuffix(".gguf")
        plans = {}
        for d in devices:
            plans[f"d{d}"] = os.path.join(out, f"{mname}.d{d}.plan")
            subprocess.run([a.tpc, "compile", model, "--devices", str(d), "-o", plans[f"d{d}"]], check=True,
                           capture_output=True)
        speeds = {(t, e): [] for t in tests for e in engines}
        for i in range(a.rounds):
            ld = load()
            res = {}
            for j in range(len(engines)):
                e = engines[(i + j) % len(engines)]
                if e == "ref":
                    r = run_ref(a.ref, model, a.pp, a.tg, a.threads, extra)
                    if depth:
                        r.update(run_ref_depth(a.ref, model, depth, a.tg, a.threads, extra))
                else:
                    exe, plan = (a.base, plans[e[5:]]) if e.startswith("base-") else (a.tpc, plans[e])
                    r = run_tpc(exe, plan, a.pp, a.tg, a.threads)
                    if depth:
                        r.update(run_tpc_depth(exe, plan, depth, a.tg, a.threads))
                res[e] = r
            for t in tests:
                for e in engines:
                    speeds[(t, e)].append(res[e][t])
            print(f"  {mname} round {i + 1} (load {ld:.1f}): " +
                  ", ".join(f"{t} " + "/".join(f"{res[e][t]:.1f}" for e in engines) for t in tests),
                  file=sys.stderr, flush=True)
        summary.append((mname, speeds))

    def spread(v):
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

    mine = [e for e in engines if e != "ref"]
    cols = ["ref t/s"] + [f"tpc {e} t/s" for e in mine] + [f"{e}/ref" for e in mine]
    if "d1" in mine:
        cols += [f"{e}/{e[:-1]}1" for e in mine if e.endswith("d2")]
    after = [e for e in mine if f"base-{e}" in mine]
    cols += [f"{e}/base-{e}" for e in after]
    print("| model | test | " + " | ".join(cols) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in cols) + " |")
    for mname, s in summary:
        for t in tests:
            cells = [f"{statistics.median(s[(t, 'ref')]):.2f}"]
            cells += [f"{statistics.median(s[(t, e)]):.2f}" for e in mine]
            cells += [spread([x / y for x, y in zip(s[(t, e)], s[(t, 'ref')])]) for e in mine]
            if "d1" in mine:
                cells += [spread([x / y for x, y in zip(s[(t, e)], s[(t, e[:-1] + "1")])])
                          for e in mine if e.endswith("d2")]
            cells += [spread([x / y for x, y in zip(s[(t, e)], s[(t, f"base-{e}")])]) for e in after]
            print(f"| {mname} | {t} | " + " | ".join(cells) + " |")
    print()
    print(f"Ratios are per round (same minute), median (min-max) over {a.rounds} rounds; t/s are medians. "
          f"Load average after: {load():.2f}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
