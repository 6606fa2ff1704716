"""Checks `tpc compile --fit` on one model under a table of budgets (issue 37 part 2).
usage: check-fit.py TPC MODEL.gguf BUDGETS=EXPECT [BUDGETS=EXPECT ...] [-- MORE --fit FLAGS]
EXPECT is the step that must make the plan fit: asked (it fits as asked), context, kv, moe, host, or refused.

For each budget: the chosen plan (`--report --json`) is within every budget; the decision lines name the
expected step; a second run writes the same plan byte for byte (reproducible). Each decision is checked to be
the cheapest that fits by compiling the alternatives with the flags a user would give, independently of the
search: the context is the largest that fits (1024 more does not, unless it is the training context); a
MoE split or host experts were needed (the plan without them does not fit at the smallest context); host
experts are as few as fit (one layer fewer does not fit) and come after both MoE splits failed; an MoE
split that fits moves no expert to the host. A refused budget names a budget that would work, and that
budget is then checked to fit. Prints one FIT line per budget."""
import json
import re
import subprocess
import sys

UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1000, "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
         "g": 1 << 30, "gib": 1 << 30, "gb": 10**9}
CTX_MIN = 4096

tpc, model = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
extra = args[args.index("--") + 1:] if "--" in args else []
cases = args[:args.index("--")] if "--" in args else args
meta = json.loads(subprocess.run([tpc, "inspect", "--json", "--metadata", model], check=True, capture_output=True,
                                 text=True).stdout)["metadata"]
arch = meta["general.architecture"]
train_ctx = int(meta[f"{arch}.context_length"])


def size(text):
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def budgets(spec):
    devs, host = [], 0
    for item in spec.split(","):
        if item.startswith("host="):
            host = size(item[5:])
        else:
            devs.append(size(item))
    return devs, host


def compile_(*flags, ok=True):
    r = subprocess.run([tpc, "compile", model, *flags], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, (flags, r.stderr)
    return r


def report(*flags):
    return json.loads(compile_(*flags, "--report", "--json").stdout)


def within(rep, devs, host):
    ok = all(d["total_bytes"] <= b for d, b in zip(rep["devices"], devs))
    return ok and (not host or sum(d["host_total_bytes"] for d in rep["devices"]) <= host)


def moe_layers(rep):
    return sorted(int(m["layer"].split(".")[1]) for m in rep["moe"])


def host_flag(layers):
    return "blk\\.(" + "|".join(str(x) for x in layers) + ")\\.ffn_.*_exps=cpu"


def summary(rep):
    return " ".join(f"{d['total_bytes'] / 2**30:.3f}" for d in rep["devices"])


for case in cases:
    spec, expect = case.rsplit("=", 1)
    devs, host = budgets(spec)
    base = ["--devices", str(len(devs))]
    r1 = compile_("--fit", spec, *extra, "--report", "--json", "-o", "/dev/null", ok=False)
    decisions = [l for l in r1.stderr.splitlines() if l.startswith("--fit:")]
    if expect == "refused":
        assert r1.returncode != 0, (spec, r1.stdout[:200])
        m = re.search(r"the smallest budget that would work: --fit (\S+)", r1.stderr)
        assert m, r1.stderr
        works = m.group(1)
        rep = json.loads(compile_("--fit", works, *extra, "--report", "--json").stdout)
        wdevs, whost = budgets(works)
        assert within(rep, wdevs, whost), (works, summary(rep))
        assert any(d > b for d, b in zip(wdevs, devs)) or whost > host, (spec, works)  # it asks for more
        print(f"FIT {spec}: refused, {works} fits ({summary(rep)} GiB)")
        continue
    assert r1.returncode == 0, (spec, r1.stderr)
    rep = json.loads(r1.stdout)
    assert within(rep, devs, host), (spec, summary(rep), decisions)
    ctx = rep["ctx"]

    # Reproducible: the same inputs give the same plan, byte for byte, and the same decisions.
    outs = []
    for _ in range(2):
        r = subprocess.run([tpc, "compile", model, "--fit", spec, *extra, "-o", "/dev/stdout"], capture_output=True)
        assert r.returncode == 0, r.stderr
        outs.append((r.stdout, [l for l in r.stderr.decode().splitlines() if l.startswith("--fit:")]))
    assert outs[0] == outs[1], spec
    assert outs[0][1] == decisions, (outs[0][1], decisions)

    # The flags the decisions stand for, as a user would write them.
    flags = list(base)
    kinds = []
    for line in decisions:
        if m := re.match(r"--fit: tensor split (\S+):", line):
            flags += ["-ts", m.group(1)]
        elif "fits as asked" in line:
            kinds.append("asked")
        elif re.match(r"--fit: context \d+ \(at ", line):
            kinds.append("context")
        elif m := re.match(r"--fit: KV caches (\S+) \(", line):
            kinds.append("kv")
            flags += ["-ctk", m.group(1), "-ctv", m.group(1)]
        elif m := re.match(r"--fit: --moe-split (\S+) \(", line):
            kinds.append("moe")
            flags += ["--moe-split", m.group(1)]
        elif m := re.search(r"the experts of (\d+) layer\(s\) on the host \(-ot '([^']+)'", line):
            kinds.append("host")
            flags += ["-ot", m.group(2)]
            k = int(m.group(1))
    assert kinds == [expect], (spec, kinds, decisions)

    # The plan is the one those flags compile (at the chosen context).
    again = report(*flags, "-c", str(ctx))
    assert [d["total_bytes"] for d in again["devices"]] == [d["total_bytes"] for d in rep["devices"]], spec

    # The context is the largest that fits with the choices made.
    if ctx < train_ctx:
        more = report(*flags, "-c", str(min(train_ctx, ctx + 1024)))
        assert not within(more, devs, host), (spec, ctx, summary(more))
    if expect in ("kv", "moe", "host"):  # the cheaper steps were not enough at the smallest context
        plain = list(flags)
        for flag in ("-ctk", "-ctv", "--moe-split", "-ot"):
            if flag in plain:
                i = plain.index(flag)
                del plain[i:i + 2]
        assert not within(report(*plain, "-c", str(CTX_MIN)), devs, host), spec
        if expect == "kv" and flags[flags.index("-ctk") + 1] == "q4_0":  # q8_0 was not enough either
            assert not within(report(*plain, "-ctk", "q8_0", "-ctv", "q8_0", "-c", str(CTX_MIN)), devs, host), spec
    if expect == "moe":  # whole experts or intermediate splits fit: no expert goes to the host
        assert all(d["host_weight_bytes"] == 0 for d in rep["devices"]), (spec, rep["devices"])
        chosen = flags[flags.index("--moe-split") + 1]
        assert all(m["split"] == chosen for m in rep["moe"]), (spec, rep["moe"])
    if expect == "host":
        layers = moe_layers(rep)
        assert any(d["host_weight_bytes"] > 0 for d in rep["devices"]), spec
        shares = flags[:flags.index("-ot")]  # -ot comes last
        for split in ("expert", "intermediate"):  # neither MoE split alone fits
            assert not within(report(*shares, "--moe-split", split, "-c", str(CTX_MIN)), devs, host), (spec, split)
        if k > 1:  # one layer fewer does not fit
            fewer = report(*shares, "-ot", host_flag(layers[len(layers) - (k - 1):]), "-c", str(CTX_MIN))
            assert not within(fewer, devs, 0), (spec, k)
    print(f"FIT {spec}: {expect}, ctx {ctx}, {' '.join(flags[2:]) or 'no flags'} ({summary(rep)} GiB)")
