#!/usr/bin/env python3
"""Benchmark (not a test): decode rate of constrained (json_schema) against unconstrained requests on
`tpc serve`, and the token mask's cost.

    bench/serve/serve_grammar.py --plan gemma.plan [--tpc build/bin/tpc] [-np 4] [--clients 1,4] [-t 8]
    bench/serve/serve_grammar.py --gguf build/demo/models/gemma-3-270m-q4_k_m.gguf   # compiled in memory

For each client count C and each mode, C threads send REQUESTS non-streamed chat requests of MAX_TOKENS
greedy tokens each. Both modes generate exactly MAX_TOKENS per request: the plain ones with ignore_eos, the
constrained ones under a schema whose minimum output is longer than MAX_TOKENS (an array of at least 500
short strings), so they stop at the length too. Reported per row: the aggregate rate (all generated tokens /
wall time of the round), the median of each request's own decode rate (the server's timings), and the
constrained/plain ratio of both (issue 31's goal: >= 0.9 on Gemma 3 270M). From /metrics: the masks
computed (the sampled token was refused), their mean cost in microseconds, and the mask time per
constrained token. All numbers of one table come from one run of one server.
"""
import argparse
import concurrent.futures
import http.client
import json
import re
import statistics
import subprocess
import sys
import time

SCHEMA = {"type": "object", "properties": {"names": {"type": "array", "minItems": 500, "maxItems": 1000,
                                                       "items": {"type": "string", "maxLength": 24}}},
          "required": ["names"], "additionalProperties": False}
PROMPT = "List as many first names as you can, as JSON: {\"names\": [...]}"


def post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    out = json.loads(res.read())
    conn.close()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {out}")
    return out


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {k: float(v) for k, v in re.findall(r"^(tpc_grammar_\w+) (\S+)$", text, re.M)}


def round_(port, clients, requests, max_tokens, constrained, prompt=PROMPT):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "names", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    before = metrics(port)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        outs = list(pool.map(lambda _: post(port, body), range(clients * requests)))
    wall = time.perf_counter() - t0
    after = metrics(port)
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    per_request = statistics.median(o["timings"]["predicted_per_second"] for o in outs)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {"tokens": tokens, "rate": tokens / wall, "per_request": per_request,
            "masks": d.get("tpc_grammar_masks_total", 0), "mask_s": d.get("tpc_grammar_mask_seconds_total", 0),
            "grammar_tokens": d.get("tpc_grammar_tokens_total", 0),
            "short": sum(o["usage"]["completion_tokens"] < max_tokens for o in outs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", help="a plan (or use --gguf)")
    ap.add_argument("--gguf", help="a GGUF, compiled in memory by tpc serve")
    ap.add_argument("--tpc", default="build/bin/tpc")
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-t", "--threads", type=int, default=0, help="tpc serve -t (0: its default)")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--requests", type=int, default=3, help="requests per client and round")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--chat-template", default="gemma3")
    ap.add_argument("--prompt", default=PROMPT,
                    help="the user message (one that does not ask for JSON makes the grammar refuse the model's "
                         "choices, so masks get computed: the mask's cost)")
    a = ap.parse_args()
    model = a.plan or a.gguf
    if not model:
        sys.exit("give --plan or --gguf")
    cmd = [a.tpc, "serve", model, "--port", "0", "--metrics", "-np", str(a.parallel), "-c", str(a.parallel * 2048),
           "--chat-template", a.chat_template]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in server.stderr:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("tpc serve did not start")
        post(port, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})  # warm-up
        print(f"{model}: -np {a.parallel}, {a.max_tokens} tokens per request, {a.requests} requests per client")
        print("| clients | plain t/s | json_schema t/s | ratio | plain t/s/request | json_schema t/s/request | ratio "
              "| masks | us/mask | mask us/token |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for c in [int(x) for x in a.clients.split(",")]:
            plain = round_(port, c, a.requests, a.max_tokens, False, a.prompt)
            js = round_(port, c, a.requests, a.max_tokens, True, a.prompt)
            us_mask = js["mask_s"] / js["masks"] * 1e6 if js["masks"] else 0.0
            us_token = js["mask_s"] / js["grammar_tokens"] * 1e6 if js["grammar_tokens"] else 0.0
            print(f"| {c} | {plain['rate']:.1f} | {js['rate']:.1f} | {js['rate'] / plain['rate']:.3f} "
                  f"| {plain['per_request']:.1f} | {js['per_request']:.1f} | {js['per_request'] / plain['per_request']:.3f} "
                  f"| {js['masks']:.0f} | {us_mask:.0f} | {us_token:.1f} |")
            if js["short"]:
                print(f"  note: {js['short']} constrained requests ended before {a.max_tokens} tokens")
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
