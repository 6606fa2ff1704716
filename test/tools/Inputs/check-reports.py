"""Checks that every memory figure of a plan agrees across the four places that print it (issue 37 part 3):
`tpc compile --report --json`, `tpc inspect --json`, `tpc inspect` (text) and the page of `tpc inspect --html`.
usage: check-reports.py TPC WORKDIR DEVICES MODEL.gguf|DIR [...] [-- COMPILE FLAGS]

For each model: compile it for DEVICES devices with --report --json (plan written with -o), then compare per
device the total at the plan's context, its parts (weights, KV with rings, activations, logits rows, host
side), and the block count. The KV figure is also checked against the cache layout the report gives: full
layers' bytes per token x the context + sliding-window layers' bytes per position x their ring, where the
ring (window + max batch, at most the context) must come out a whole number of positions. Prints one
REPORTS-OK line per model with its blocks and device totals."""
import html.parser
import json
import os
import re
import subprocess
import sys

TPC = sys.argv[1]
args = sys.argv[2:]
extra = []
if "--" in args:
    extra = args[args.index("--") + 1:]
    args = args[:args.index("--")]
work, devices, models = args[0], args[1], []
for m in args[2:]:  # a directory stands for its GGUF files, in name order
    models += sorted(os.path.join(m, f) for f in os.listdir(m) if f.endswith(".gguf")) if os.path.isdir(m) else [m]


def run(*a):
    return subprocess.run([TPC, *a], check=True, capture_output=True, text=True).stdout


class Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.items = []

    def handle_starttag(self, tag, attrs):
        self.items.append((tag, dict(attrs)))


for gguf in models:
    name = os.path.basename(gguf).rsplit(".", 1)[0]
    plan, page = os.path.join(work, name + ".plan"), os.path.join(work, name + ".html")
    report = json.loads(run("compile", gguf, "--devices", devices, *extra, "--report", "--json", "-o", plan))
    inspect = json.loads(run("inspect", "--json", plan))
    text = run("inspect", plan)
    run("inspect", plan, "--html", page)
    parser = Elements()
    parser.feed(open(page, encoding="utf-8").read())
    segs = [a for _, a in parser.items if "mem-seg" in a.get("class", "").split()]

    ctx = report["ctx"]
    assert ctx == inspect["default_ctx"], (name, ctx, inspect["default_ctx"])
    assert report["blocks"] == inspect["blocks"] > 0, (name, report["blocks"], inspect["blocks"])
    page_blocks = [a["data-blocks"] for _, a in parser.items if "data-blocks" in a]
    assert page_blocks == [str(report["blocks"])], (name, page_blocks)
    assert f"blocks: {report['blocks']}\n" in text, name
    totals = re.findall(r"for ctx (\d+); total [^(]+\((\d+) bytes\)", text)
    host_totals = [int(x) for x in re.findall(r"host steps; total [^(]+\((\d+) bytes\)", text)]
    assert len(totals) == len(report["devices"]) == len(inspect["devices"]), (name, totals)

    rings = set()
    for d, (r, i) in enumerate(zip(report["devices"], inspect["devices"])):
        where = f"{name} device {d}"
        for key in ("total_bytes", "kv_bytes", "logits_bytes", "host_total_bytes", "host_kv_bytes",
                    "weight_bytes", "activation_bytes", "host_weight_bytes", "host_activation_bytes"):
            assert r[key] == i[key], (where, key, r[key], i[key])
        assert r["total_bytes"] == r["weight_bytes"] + r["kv_bytes"] + r["activation_bytes"] + r["logits_bytes"], \
            (where, r)
        assert totals[d] == (str(ctx), str(r["total_bytes"])), (where, totals[d], r["total_bytes"])
        if r["host_total_bytes"]:
            assert r["host_total_bytes"] in host_totals, (where, host_totals, r["host_total_bytes"])
        mine = {(a["data-kind"], a["data-side"]): int(a["data-bytes"]) for a in segs if a["data-device"] == str(d)}
        assert sum(v for (k, side), v in mine.items() if side == "device") == r["total_bytes"], (where, mine, r)
        assert mine.get(("kv", "device"), 0) == r["kv_bytes"], (where, mine, r)
        assert mine.get(("kv", "host"), 0) == r["host_kv_bytes"], (where, mine, r)
        # KV from the layout: full layers grow with the context, sliding-window layers are rings.
        full = r["kv_full_bytes_per_token"] * ctx
        rec = r["recurrent_bytes_per_sequence"]
        window = r["kv_bytes"] - full - (rec if r["host_kv_bytes"] == 0 else 0)
        if r["kv_window_layers"]:
            per = r["kv_window_bytes_per_position"]
            assert per > 0 and window % per == 0, (where, window, per)
            ring = window // per
            assert 0 < ring <= ctx, (where, ring, ctx)
            rings.add(ring)
            if ring < ctx:  # a ring shorter than the context: the page must not draw the whole context
                assert r["kv_bytes"] < (r["kv_full_bytes_per_token"] + per) * ctx, where
        elif r["host_kv_bytes"] == 0:
            assert window == 0, (where, r)
    print(f"REPORTS-OK {name}: {report['blocks']} blocks, ctx {ctx}, rings",
          ",".join(str(x) for x in sorted(rings)) or "none", "totals",
          " ".join(str(r["total_bytes"]) for r in report["devices"]))
