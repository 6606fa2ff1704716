"""Recomputes `tpc perplexity`'s numbers independently and compares them with its output.

Usage: check-perplexity.py TPC MODEL.gguf PLAN TEXT CTX CHUNKS OUTPUT

Tokenizes TEXT with `tpc tokenize` (BOS added), cuts the ids into CHUNKS chunks of CTX tokens whose first
token is the BOS, gets every chunk's logits rows from `tpc run --prompt-ids ... -n 0 --dump-logits`, and
scores positions CTX/2 .. CTX-2 (each predicting the next token) with a float64 log-sum-exp. Then checks
every running estimate "[k]PPL," and the final "PPL = X +/- E" line in OUTPUT (the perplexity command's
stdout) against exp(mean NLL) and ppl * sqrt(var / (n - 1)). Prints "PPL-OK <ppl>" or exits 1.
"""
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

tpc, model, plan, text, ctx, chunks, output = sys.argv[1:8]
ctx, chunks = int(ctx), int(chunks)
ids = [int(t) for t in subprocess.check_output([tpc, "tokenize", model, open(text).read()]).split()]
bos = ids[0]
count = min(len(ids) // ctx, chunks)
first = ctx // 2
nlls, running = [], []
with tempfile.TemporaryDirectory() as tmp:
    for k in range(count):
        chunk = ids[k * ctx:(k + 1) * ctx]
        chunk[0] = bos
        dump = os.path.join(tmp, f"chunk{k}.f32")
        subprocess.check_call([tpc, "run", plan, "--prompt-ids", ",".join(map(str, chunk)), "-n", "0",
                               "--dump-logits", dump], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        raw = open(dump, "rb").read()
        vocab = len(raw) // 4 // ctx
        rows = struct.unpack(f"<{ctx * vocab}f", raw)
        for pos in range(first, ctx - 1):
            row = rows[pos * vocab:(pos + 1) * vocab]
            mx = max(row)
            lse = mx + math.log(sum(math.exp(v - mx) for v in row))
            nlls.append(lse - row[chunk[pos + 1]])
        running.append(math.exp(sum(nlls) / len(nlls)))

n = len(nlls)
mean = sum(nlls) / n
var = sum(v * v for v in nlls) / n - mean * mean
ppl = math.exp(mean)
err = ppl * math.sqrt(var / (n - 1))
out = open(output).read()
got_running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", out)]
final = re.search(r"PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
fail = []
if len(got_running) != count:
    fail.append(f"{len(got_running)} running estimates, expected {count}")
for k, (g, e) in enumerate(zip(got_running, running)):
    if abs(g - e) > 1e-4 * max(1.0, e):
        fail.append(f"chunk {k + 1}: running estimate {g}, recomputed {e:.6f}")
if not final:
    fail.append("no final estimate")
else:
    if abs(float(final.group(1)) - ppl) > 1e-4 * ppl:
        fail.append(f"final {final.group(1)}, recomputed {ppl:.6f}")
    if abs(float(final.group(2)) - err) > 1e-4 * max(err, 1e-3):
        fail.append(f"error {final.group(2)}, recomputed {err:.6f}")
if f"{n} scored tokens" not in out:
    fail.append(f"expected {n} scored tokens ({count} chunks x {ctx - 1 - first})")
if fail:
    print("PPL-MISMATCH: " + "; ".join(fail))
    sys.exit(1)
print(f"PPL-OK {ppl:.4f} over {n} tokens")
