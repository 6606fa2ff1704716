#!/usr/bin/env python3
"""Benchmark (not a test) of prompt caching in `tpc serve` (issue 32's goal): the time to first token of
the next turn of a ~2,000-token conversation, whose history the slot still holds, against a cold 50-token
prompt's. Goal: ratio <= 1.2.

    bench/serve/prompt_cache_ttft.py --plan PLAN_OR_GGUF [--tpc build/bin/tpc] [-t 4] [--rounds 5]
    bench/serve/prompt_cache_ttft.py --url http://127.0.0.1:8080       # a running server (llama-server too)

The conversation is a system prompt and a user message of filler sentences, grown until the chat prompt
(/apply-template, /tokenize) holds --history tokens; turn 1 is answered (16 greedy tokens), then each round
sends the history, that answer and a new short question and times the first streamed token (the first chunk
that carries a token: return_tokens, so a held-back UTF-8 piece still counts). The baseline is a 50-token
prompt with cache_prompt false. Both are medians over --rounds. With --plan the script starts `tpc serve
-np 1` on 127.0.0.1 and a free port and stops it.
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

FILLER = ("The harbour was quiet in the early morning, and the fishing boats rocked gently against the pier "
          "while gulls circled above the nets that the old men had spread out to dry. ")


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80

    def post(self, path, body):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        res = conn.getresponse()
        data = res.read()
        conn.close()
        if res.status != 200:
            raise RuntimeError(f"{path}: HTTP {res.status}: {data[:300]!r}")
        return json.loads(data)

    def first_token_ms(self, path, body):
        """Milliseconds from sending `body` (streamed) to the first chunk that carries a token."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        body = dict(body, stream=True, return_tokens=True)
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        res = conn.getresponse()
        if res.status != 200:
            raise RuntimeError(f"{path}: HTTP {res.status}: {res.read()[:300]!r}")
        first = None
        for raw in res:
            line = raw.decode("utf-8", "replace").strip()
            if first is None and line.startswith("data: {"):
                chunk = json.loads(line[6:])
                choices = chunk.get("choices") or [{}]
                if choices[0].get("tokens") or chunk.get("tokens"):
                    first = (time.perf_counter() - t0) * 1000
        conn.close()
        return first


def prompt_tokens(client, messages):
    text = client.post("/apply-template", {"messages": messages})["prompt"]
    return len(client.post("/tokenize", {"content": text, "add_special": False})["tokens"])


def run(client, history, rounds):
    system = {"role": "system", "content": "You are a patient storyteller. Answer briefly."}
    story = FILLER
    while prompt_tokens(client, [system, {"role": "user", "content": story}]) < history:
        story += FILLER
    turn1 = [system, {"role": "user", "content": "Read this and tell me what happens next.\n\n" + story}]
    n1 = prompt_tokens(client, turn1)
    answer = client.post("/v1/chat/completions", {"messages": turn1, "max_tokens": 16, "temperature": 0,
                                                   "id_slot": 0})
    reply = answer["choices"][0]["message"]["content"]
    warm = []
    for r in range(rounds):
        turn2 = turn1 + [{"role": "assistant", "content": reply},
                         {"role": "user", "content": f"Question {r}: who was on the pier?"}]
        warm.append(client.first_token_ms("/v1/chat/completions",
                                          {"messages": turn2, "max_tokens": 1, "temperature": 0, "id_slot": 0,
                                           "stream_options": {"include_usage": True}}))
    last = client.post("/v1/chat/completions", {"messages": turn2, "max_tokens": 1, "temperature": 0, "id_slot": 0})
    cached = last["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
    # The baseline: cache_prompt false drops the slot's sequence, so it runs after the warm rounds.
    ids = client.post("/tokenize", {"content": FILLER * 2, "add_special": True})["tokens"][:50]
    cold = [client.first_token_ms("/v1/completions", {"prompt": ids, "max_tokens": 1, "temperature": 0,
                                                      "cache_prompt": False, "id_slot": 0})
            for _ in range(rounds)]
    w, c = statistics.median(warm), statistics.median(cold)
    print(f"history: {n1} prompt tokens in turn 1; next turn {last['usage']['prompt_tokens']} tokens, "
          f"{cached} of them cached")
    print(f"TTFT next turn (cached history): median {w:.1f} ms  {['%.1f' % x for x in warm]}")
    print(f"TTFT 50-token cold prompt:      median {c:.1f} ms  {['%.1f' % x for x in cold]}")
    print(f"ratio {w / c:.2f} (goal <= 1.2): {'met' if w / c <= 1.2 else 'NOT met'}")
    return w / c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan")
    ap.add_argument("--url")
    ap.add_argument("--tpc", default="build/bin/tpc")
    ap.add_argument("-t", "--threads", default="0")
    ap.add_argument("--history", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if bool(args.plan) == bool(args.url):
        ap.error("give --plan or --url")
    if args.url:
        run(Client(args.url), args.history, args.rounds)
        return
    proc = subprocess.Popen([args.tpc, "serve", args.plan, "--port", "0", "-np", "1", "-c", "8192", "-t",
                             args.threads], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port, ready = [None], threading.Event()

    def read():
        for line in proc.stderr:
            sys.stderr.write(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port[0] = int(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(600) or port[0] is None:
            sys.exit("tpc serve did not start")
        run(Client(f"http://127.0.0.1:{port[0]}"), args.history, args.rounds)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
