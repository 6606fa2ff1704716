#!/usr/bin/env python3
"""Benchmark (not a test) of `tpc serve` or any OpenAI-compatible server under concurrent clients.

    bench/serve/serve_bench.py --plan PLAN [--tpc build/bin/tpc] [-np 4] [--clients 1,2,4,8]
    bench/serve/serve_bench.py --url http://127.0.0.1:8080 [--model NAME]      # an already running server

For each client count C, C threads each send REQUESTS streamed /v1/completions requests (a fixed prompt of
PROMPT_TOKENS ids, MAX_TOKENS greedy tokens, ignore_eos so every request decodes the same length) and the
script reports the aggregate rate (all generated tokens / wall time of the round, prompt reading included),
the steady decode rate (min(C, -np) / median time between tokens), p50/p99 time to first token and p50/p99
time between tokens, and each rate as a multiple of the one-client rate. With tpc serve it also reports the
scheduler's time split from /metrics (engine / host / idle, decode slots per step, engine ms per step of
decode tokens only: compare with `tpc run --bench --parallel`) and the CPU seconds of server and client. All
numbers of one table come from one run. With --plan it starts `tpc serve` itself (127.0.0.1, a free port)
and stops it; against llama-server use --url (its /v1/completions streams the same way).
"""
import argparse
import http.client
import json
import os
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


def scrape(host, port):
    """tpc serve's scheduler counters from /metrics ({} for a server without them, e.g. llama-server)."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/metrics")
        res = conn.getresponse()
        text = res.read().decode("utf-8", "replace") if res.status == 200 else ""
        conn.close()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"(tpc_[a-z_]+) ([0-9.eE+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), or None."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def run_round(host, port, clients, requests, prompt, max_tokens, model, pid):
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

    before = scrape(host, port)
    cpu0, client0 = cpu_seconds(pid), time.process_time()
    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu1, client1 = cpu_seconds(pid), time.process_time()
    after = scrape(host, port)
    d = {k: after[k] - before.get(k, 0) for k in after}
    # With tpc serve: the share of the round the scheduler spent inside the engine, around it (host work)
    # and idle, and the decode slots per decode step.
    sched = {}
    if d.get("tpc_decode_steps_total"):
        sched = {"engine": d["tpc_engine_seconds_total"] / wall, "host": d["tpc_host_seconds_total"] / wall,
                 "idle": d["tpc_idle_seconds_total"] / wall,
                 "slots": d["tpc_decode_entries_total"] / d["tpc_decode_steps_total"],
                 "steps": d["tpc_steps_total"], "pure": d.get("tpc_pure_decode_steps_total", 0)}
        if sched["pure"]:
            sched["pure_ms"] = 1000 * d["tpc_pure_decode_engine_seconds_total"] / sched["pure"]
            sched["pure_slots"] = d["tpc_pure_decode_entries_total"] / sched["pure"]
    return {"clients": clients, "tokens": tokens[0], "wall": wall, "ts": tokens[0] / wall, "sched": sched,
            "server_cpu": None if cpu0 is None or cpu1 is None else cpu1 - cpu0, "client_cpu": client1 - client0,
            "ttft50": pct(ttft, 0.5), "ttft99": pct(ttft, 0.99), "tpot50": pct(gaps, 0.5), "tpot99": pct(gaps, 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan")
    ap.add_argument("--tpc", default="build/bin/tpc")
    ap.add_argument("--url")
    ap.add_argument("--model", default="")
    ap.add_argument("--pid", type=int, default=0, help="with --url: the server's pid, for its CPU time")
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
                                   "--metrics",  # off by default, as in llama-server
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
        rows = [run_round(u.hostname, u.port, int(c), a.requests, prompt, a.max_tokens, a.model,
                          server.pid if server else a.pid)
                for c in a.clients.split(",")]
    finally:
        if server:
            server.terminate()
            server.wait(60)
    base = rows[0]["ts"]
    # steady decode t/s: the slots decoding at once (clients, at most -np) over the median time between
    # tokens, i.e. the rate while every active request decodes, without the prompt reading that the
    # aggregate rate includes.
    print(f"| clients | tokens | wall s | aggregate t/s | x one client | steady decode t/s | x one client | "
          f"TTFT p50 ms | TTFT p99 ms | per-token p50 ms | per-token p99 ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    steady = [min(r["clients"], a.parallel) / r["tpot50"] for r in rows]
    for r, d in zip(rows, steady):
        print(f"| {r['clients']} | {r['tokens']} | {r['wall']:.1f} | {r['ts']:.2f} | {r['ts'] / base:.2f} | "
              f"{d:.2f} | {d / steady[0]:.2f} | "
              f"{1000 * r['ttft50']:.0f} | {1000 * r['ttft99']:.0f} | {1000 * r['tpot50']:.1f} | "
              f"{1000 * r['tpot99']:.1f} |")
    # CPU time of the round: the server process (all threads) and this client (4 Python threads share
    # the cores with the server); tokens per server CPU-second is less sensitive to a shared machine.
    print("\n| clients | server CPU s | t/s per server CPU-s | client CPU s |")
    print("| ---: | ---: | ---: | ---: |")
    for r in rows:
        sc = r["server_cpu"]
        per = "-" if not sc else f"{r['tokens'] / sc:.2f}"
        print(f"| {r['clients']} | {'-' if sc is None else f'{sc:.2f}'} | {per} | {r['client_cpu']:.2f} |")
    if any(r["sched"] for r in rows):
        # The scheduler thread's time (tpc serve's /metrics): inside the engine, around it, idle; and the
        # steps of decode tokens only, whose engine ms compare with `tpc run --bench --parallel N`.
        print("\n| clients | steps | engine % | host % | idle % | decode slots / step | pure decode steps | "
              "engine ms / pure decode step | slots / pure decode step |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            s = r["sched"]
            if s:
                print(f"| {r['clients']} | {s['steps']:.0f} | {100 * s['engine']:.1f} | {100 * s['host']:.2f} | "
                      f"{100 * s['idle']:.1f} | {s['slots']:.2f} | {s['pure']:.0f} | {s.get('pure_ms', 0):.2f} | "
                      f"{s.get('pure_slots', 0):.2f} |")


if __name__ == "__main__":
    main()
