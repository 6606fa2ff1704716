#!/usr/bin/env python3
"""Benchmark (not a test) of `tpc serve` or any OpenAI-compatible server under concurrent clients.

    bench/serve/serve_bench.py --plan PLAN [--tpc build/bin/tpc] [-np 4] [--clients 1,2,4,8]
    bench/serve/serve_bench.py --url http://127.0.0.1:8080 [--model NAME]      # an already running server

For each client count C, C threads each send REQUESTS streamed /v1/completions requests (a fixed prompt of
PROMPT_TOKENS ids, MAX_TOKENS greedy tokens, ignore_eos so every request decodes the same length) and the
script reports the aggregate decode rate (all generated tokens / wall time of the round), p50/p99 time to
first token and p50/p99 time between tokens, and each rate as a multiple of the one-client rate. All
numbers of one table come from one run. With --plan it starts `tpc serve` itself (127.0.0.1, a free port)
and stops it; against llama-server use --url (its /v1/completions streams the same way).
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def one_request(host, port, prompt, max_tokens, model):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    # return_tokens: tpc sends a chunk for every token (also those whose text is held back: a partial UTF-8
    # character), so each chunk stamps one token; llama-server streams one chunk per token anyway.
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "n_predict": max_tokens, "cache_prompt": False, "return_tokens": True}
    if model:
        body["model"] = model
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:200]!r}")
    stamps = []
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("finish_reason") is None:
                stamps.append(time.perf_counter())
    conn.close()
    return t0, stamps


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def run_round(host, port, clients, requests, prompt, max_tokens, model):
    ttft, gaps, tokens = [], [], [0]
    lock = threading.Lock()

    def client():
        for _ in range(requests):
            t0, stamps = one_request(host, port, prompt, max_tokens, model)
            with lock:
                tokens[0] += len(stamps)
                if stamps:
                    ttft.append(stamps[0] - t0)
                    gaps.extend(b - a for a, b in zip(stamps, stamps[1:]))

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {"clients": clients, "tokens": tokens[0], "wall": wall, "ts": tokens[0] / wall,
            "ttft50": pct(ttft, 0.5), "ttft99": pct(ttft, 0.99), "tpot50": pct(gaps, 0.5), "tpot99": pct(gaps, 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan")
    ap.add_argument("--tpc", default="build/bin/tpc")
    ap.add_argument("--url")
    ap.add_argument("--model", default="")
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="tpc serve -t (0: all cores)")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per round")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    server = None
    if a.plan:
        server = subprocess.Popen([a.tpc, "serve", a.plan, "--port", "0", "-np", str(a.parallel), "-t", str(a.threads),
                                   # -c is every slot's context together (llama-server's meaning)
                                   "-c", str((a.prompt_tokens + a.max_tokens + 8) * a.parallel)],
                                  stderr=subprocess.PIPE, text=True)
        for line in server.stderr:
            sys.stderr.write(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                a.url = m.group(1)
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    if not a.url:
        sys.exit("give --plan or --url")
    u = urllib.parse.urlparse(a.url)
    prompt = [1] + [3 + (11 * i) % 400 for i in range(a.prompt_tokens - 1)]
    try:
        one_request(u.hostname, u.port, prompt, 4, a.model)  # warm-up
        rows = [run_round(u.hostname, u.port, int(c), a.requests, prompt, a.max_tokens, a.model)
                for c in a.clients.split(",")]
    finally:
        if server:
            server.terminate()
            server.wait(60)
    base = rows[0]["ts"]
    print(f"| clients | tokens | wall s | aggregate t/s | x one client | TTFT p50 ms | TTFT p99 ms | "
          f"per-token p50 ms | per-token p99 ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['clients']} | {r['tokens']} | {r['wall']:.1f} | {r['ts']:.2f} | {r['ts'] / base:.2f} | "
              f"{1000 * r['ttft50']:.0f} | {1000 * r['ttft99']:.0f} | {1000 * r['tpot50']:.1f} | "
              f"{1000 * r['tpot99']:.1f} |")


if __name__ == "__main__":
    main()
