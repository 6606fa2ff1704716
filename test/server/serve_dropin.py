"""`tpc serve` as a drop-in for llama-server (issue 32), with curl and plain HTTP as the clients:
llama-server's routes (/completion streamed and not, /props, /slots, /apply-template, /models), the
Anthropic Messages and OpenAI Responses shapes, CORS from an allowed and a refused origin, prompt caching
(the next turn reports the cached tokens and gives the cold run's greedy tokens; on a recurrent plan only
a whole previous sequence is kept), logit_bias, n = 3 with seeds, the llamacpp: metrics, the chat template
fallback of a GGUF without one, and llama-server's flag spellings."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import serve_util as su

KEY = "sk-dropin"
AUTH = {"Authorization": "Bearer " + KEY}
ALLOWED = "http://allowed.example:3000"


def curl(url, body=None, stream=False, headers=(), method=None):
    """(status, parsed body or the raw text of a stream) with curl."""
    cmd = ["curl", "-sS", "--max-time", "120", "-w", "\n%{http_code}", url]
    if stream:
        cmd.insert(1, "-N")
    if method:
        cmd += ["-X", method]
    for h in headers:
        cmd += ["-H", h]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=150).stdout
    text, status = out.rsplit("\n", 1)
    if stream:
        return int(status), text
    try:
        return int(status), json.loads(text)
    except ValueError:
        return int(status), text


def typed_events(text):
    """[(event name, data)] of a stream with `event:` lines (Anthropic, Responses)."""
    events, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    return events


class ServeDropIn(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "2048", "--chat-template", "chatml", "--api-key", KEY,
                               "--metrics", "--cors-origins", ALLOWED + ",https://other.example",
                               "--alias", "first-name,second-name", "--jinja")
        cls.url = cls.server.url

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def post(self, path, body, **kw):
        status, out = self.server.post(path, body, headers=AUTH, **kw)
        self.assertEqual(status, 200, (path, body, out))
        return out

    # llama-server's own routes ---------------------------------------------------------------------------

    def test_completion_native_shape_and_greedy_tokens(self):
        want = su.run_greedy(self.plan, "Once upon a time", 6)
        status, got = curl(self.url + "/completion", {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0,
                                                     "return_tokens": True, "n_probs": 2, "cache_prompt": False},
                           headers=["Authorization: Bearer " + KEY])
        self.assertEqual(status, 200, got)
        self.assertEqual(got["tokens"], want[: len(got["tokens"])])
        self.assertTrue(got["stop"])
        self.assertEqual(got["tokens_predicted"], len(got["tokens"]))
        self.assertEqual(got["stop_type"], "limit" if len(got["tokens"]) == 6 else "eos")
        self.assertEqual(got["stopped_limit"], got["stop_type"] == "limit")
        self.assertIn(got["id_slot"], (0, 1))
        self.assertEqual(got["model"], "first-name")
        self.assertEqual(got["generation_settings"]["n_predict"], 6)
        self.assertEqual(got["generation_settings"]["n_ctx"], 1024)
        for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "cache_n"):
            self.assertIn(key, got["timings"])
        self.assertEqual(got["timings"]["predicted_n"], len(got["tokens"]))
        probs = got["completion_probabilities"]
        self.assertEqual([p["id"] for p in probs], got["tokens"])
        for p in probs:
            self.assertEqual(len(p["top_logprobs"]), 2)
            self.assertEqual(p["top_logprobs"][0]["id"], p["id"])  # greedy: the most likely
            self.assertEqual(len(p["probs"]), 2)
        # A mixed prompt (string then ids) and the same prompt as ids give the same tokens.
        head = self.post("/tokenize", {"content": "Once upon", "add_special": True})["tokens"]
        tail = self.post("/tokenize", {"content": " a time", "add_special": False})["tokens"]
        mixed = self.post("/completion", {"prompt": ["Once upon", *tail], "n_predict": 3, "temperature": 0,
                                          "return_tokens": True})
        plain = self.post("/completion", {"prompt": head + tail, "n_predict": 3, "temperature": 0,
                                          "return_tokens": True})
        self.assertEqual(mixed["tokens_evaluated"], plain["tokens_evaluated"])
        self.assertEqual(mixed["tokens_evaluated"], len(head) + len(tail))
        self.assertEqual(mixed["tokens"], plain["tokens"])

    def test_completion_streamed(self):
        whole = self.post("/completion", {"prompt": "Hello", "n_predict": 5, "temperature": 0, "return_tokens": True})
        status, text = curl(self.url + "/completion", {"prompt": "Hello", "n_predict": 5, "temperature": 0,
                                                      "stream": True, "return_tokens": True},
                            stream=True, headers=["Authorization: Bearer " + KEY])
        self.assertEqual(status, 200)
        events = [json.loads(l[6:]) for l in text.splitlines() if l.startswith("data: ")]
        self.assertNotIn("[DONE]", text)  # llama-server's /completion ends with the stop event
        self.assertTrue(all(not e["stop"] for e in events[:-1]))
        last = events[-1]
        self.assertTrue(last["stop"])
        self.assertEqual("".join(e["content"] for e in events), whole["content"])
        self.assertEqual([t for e in events[:-1] for t in e["tokens"]], whole["tokens"])
        self.assertEqual(last["tokens_predicted"], len(whole["tokens"]))

    def test_props_slots_models_apply_template(self):
        props = self.server.request("GET", "/props", headers=AUTH)[1]
        self.assertEqual(props["total_slots"], 2)
        self.assertEqual(props["default_generation_settings"]["n_ctx"], 1024)
        self.assertEqual(props["chat_template"], "chatml")
        slots = self.server.request("GET", "/slots", headers=AUTH)[1]
        self.assertEqual([s["id"] for s in slots], [0, 1])
        self.assertTrue(all(s["state"] in (0, 1) and "n_ctx" in s for s in slots))
        models = self.server.request("GET", "/models", headers=AUTH)[1]
        self.assertEqual([m["id"] for m in models["data"]], ["first-name", "second-name"])
        text = self.post("/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})["prompt"]
        self.assertEqual(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")

    def test_metrics_llamacpp_names(self):
        before = self.server.metrics(AUTH)
        self.post("/completion", {"prompt": "Hello", "n_predict": 3, "temperature": 0})
        after = self.server.metrics(AUTH)
        for name in ("prompt_tokens_total", "tokens_predicted_total", "prompt_tokens_seconds",
                     "predicted_tokens_seconds", "requests_processing", "requests_deferred", "n_decode_total",
                     "n_busy_slots_per_decode", "kv_cache_tokens", "kv_cache_usage_ratio", "prompt_seconds_total",
                     "tokens_predicted_seconds_total"):
            self.assertIn("llamacpp:" + name, after, name)
        self.assertGreater(after["llamacpp:tokens_predicted_total"], before["llamacpp:tokens_predicted_total"])
        self.assertEqual(after["llamacpp:tokens_predicted_total"], after["tpc_generated_tokens_total"])
        self.assertGreater(after["llamacpp:tokens_predicted_seconds_total"],
                           before["llamacpp:tokens_predicted_seconds_total"])
        self.assertGreater(after["llamacpp:kv_cache_usage_ratio"], 0)  # the slot kept its sequence
        self.assertLessEqual(after["llamacpp:kv_cache_usage_ratio"], 1)

    # OpenAI details -----------------------------------------------------------------------------------------

    def test_any_model_name_and_first_chunk_role_alone(self):
        body = {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        events = self.server.stream("/v1/chat/completions", body, headers=AUTH)
        self.assertEqual(events[0]["choices"][0]["delta"], {"role": "assistant"})
        self.assertTrue(all("role" not in e["choices"][0]["delta"] for e in events[1:-2]))
        usage = events[-2]["usage"]
        self.assertIn("cached_tokens", usage["prompt_tokens_details"])
        self.assertEqual(events[-1], "[DONE]")

    def test_logit_bias_bans_and_boosts(self):
        base = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "return_tokens": True,
                "ignore_eos": True}
        greedy = self.post("/v1/completions", base)["choices"][0]["tokens"]
        banned = greedy[0]
        got = self.post("/v1/completions", dict(base, logit_bias={str(banned): -100}))["choices"][0]["tokens"]
        self.assertNotIn(banned, got)
        got = self.post("/completion", dict(base, logit_bias=[[banned, False]]))["tokens"]
        self.assertNotIn(banned, got)
        boosted = 7 if banned != 7 else 8
        got = self.post("/v1/completions", dict(base, logit_bias={str(boosted): 100}))["choices"][0]["tokens"]
        self.assertIn(boosted, got)
        # A string biases its tokens (llama-server's form): boosting a word's tokens makes them appear.
        word = self.post("/tokenize", {"content": "zebra"})["tokens"]
        got = self.post("/completion", dict(base, logit_bias=[["zebra", 50]]))["tokens"]
        self.assertTrue(set(got) & set(word), (got, word))

    def test_n3_independent_seeded_choices(self):
        body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.5, "top_k": 0, "top_p": 1,
                "min_p": 0, "seed": 77, "n": 3, "return_tokens": True}
        a = self.post("/v1/completions", body)
        b = self.post("/v1/completions", body)
        self.assertEqual([c["index"] for c in a["choices"]], [0, 1, 2])
        self.assertEqual([c["tokens"] for c in a["choices"]], [c["tokens"] for c in b["choices"]])
        self.assertEqual(a["usage"]["completion_tokens"], sum(len(c["tokens"]) for c in a["choices"]))
        # Choice i is the request with seed + i.
        for i in range(3):
            one = self.post("/v1/completions", dict(body, n=1, seed=77 + i))["choices"][0]["tokens"]
            self.assertEqual(a["choices"][i]["tokens"], one)
        self.assertGreater(len({tuple(c["tokens"]) for c in a["choices"]}), 1)
        # Streamed chat: every choice's role, text and finish arrive under its index.
        events = self.server.stream("/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "n": 3,
                                     "seed": 5, "stream": True}, headers=AUTH)
        finishes = sorted(e["choices"][0]["index"] for e in events[:-1] if e["choices"][0]["finish_reason"])
        self.assertEqual(finishes, [0, 1, 2])
        roles = [e["choices"][0]["index"] for e in events[:-1] if e["choices"][0]["delta"].get("role")]
        self.assertEqual(roles, [0, 1, 2])

    # Prompt caching --------------------------------------------------------------------------------------------

    def test_prompt_cache_next_turn(self):
        turn1 = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "A story, please."}]
        r1 = self.post("/v1/chat/completions", {"messages": turn1, "max_tokens": 12, "temperature": 0,
                                                 "id_slot": 1})
        reply = r1["choices"][0]["message"]["content"]
        turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        body = {"messages": turn2, "max_tokens": 10, "temperature": 0, "return_tokens": True}
        warm = self.post("/v1/chat/completions", dict(body, id_slot=1))
        self.assertGreaterEqual(warm["usage"]["prompt_tokens_details"]["cached_tokens"],
                                r1["usage"]["prompt_tokens"])
        self.assertEqual(warm["timings"]["cache_n"], warm["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(warm["timings"]["prompt_n"],
                         warm["usage"]["prompt_tokens"] - warm["timings"]["cache_n"])
        cold = self.post("/v1/chat/completions", dict(body, cache_prompt=False, id_slot=0))
        self.assertEqual(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(warm["choices"][0]["tokens"], cold["choices"][0]["tokens"])
        # Token ids: the cache holds exactly the prompt and the evaluated generated tokens.
        p1 = self.post("/tokenize", {"content": "The quick brown fox", "add_special": True})["tokens"]
        g1 = self.post("/v1/completions", {"prompt": p1, "max_tokens": 5, "temperature": 0, "return_tokens": True,
                                           "ignore_eos": True, "id_slot": 0})["choices"][0]["tokens"]
        p2 = p1 + g1 + p1[1:]
        warm = self.post("/v1/completions", {"prompt": p2, "max_tokens": 5, "temperature": 0, "return_tokens": True,
                                             "id_slot": 0})
        self.assertEqual(warm["usage"]["prompt_tokens_details"]["cached_tokens"], len(p1) + len(g1) - 1)
        cold = self.post("/v1/completions", {"prompt": p2, "max_tokens": 5, "temperature": 0, "return_tokens": True,
                                             "cache_prompt": False, "id_slot": 1})
        self.assertEqual(warm["choices"][0]["tokens"], cold["choices"][0]["tokens"])

    # The other APIs -----------------------------------------------------------------------------------------------

    def test_anthropic_messages(self):
        body = {"model": "claude-3-5-sonnet", "max_tokens": 6, "system": [{"type": "text", "text": "Be brief."}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], "temperature": 0}
        status, got = curl(self.url + "/v1/messages", body, headers=["x-api-key: " + KEY,
                                                                    "anthropic-version: 2023-06-01"])
        self.assertEqual(status, 200, got)
        self.assertEqual(got["type"], "message")
        self.assertEqual(got["role"], "assistant")
        self.assertEqual(got["content"][0]["type"], "text")
        self.assertIn(got["stop_reason"], ("end_turn", "max_tokens"))
        self.assertEqual(got["usage"]["output_tokens"] <= 6, True)
        status, text = curl(self.url + "/v1/messages", dict(body, stream=True), stream=True,
                            headers=["x-api-key: " + KEY])
        events = typed_events(text)
        names = [n for n, _ in events]
        self.assertEqual(names[:3], ["message_start", "content_block_start", "ping"])
        self.assertEqual(names[-3:], ["content_block_stop", "message_delta", "message_stop"])
        self.assertTrue(all(d["type"] == n for n, d in events))
        streamed = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
        self.assertEqual(streamed, got["content"][0]["text"])
        self.assertEqual(events[-2][1]["delta"]["stop_reason"], got["stop_reason"])
        status, err = curl(self.url + "/v1/messages", body, headers=["x-api-key: wrong"])
        self.assertEqual(status, 401)
        self.assertEqual(err["error"]["type"], "authentication_error")
        count = self.post("/v1/messages/count_tokens", {"messages": body["messages"], "system": "Be brief."})
        self.assertGreater(count["input_tokens"], 3)

    def test_responses_api(self):
        body = {"model": "gpt-4.1", "input": "Hello", "instructions": "Be brief.", "max_output_tokens": 5,
                "temperature": 0}
        got = self.post("/v1/responses", body)
        self.assertEqual(got["object"], "response")
        self.assertIn(got["status"], ("completed", "incomplete"))
        text = got["output"][0]["content"][0]["text"]
        self.assertEqual(got["output"][0]["content"][0]["type"], "output_text")
        self.assertLessEqual(got["usage"]["output_tokens"], 5)
        items = self.post("/v1/responses", dict(body, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Hello"}]}]))
        self.assertEqual(items["output"][0]["content"][0]["text"], text)  # the same conversation
        status, raw = curl(self.url + "/v1/responses", dict(body, stream=True), stream=True,
                           headers=["Authorization: Bearer " + KEY])
        events = typed_events(raw)
        names = [n for n, _ in events]
        self.assertEqual(names[:4], ["response.created", "response.in_progress", "response.output_item.added",
                                     "response.content_part.added"])
        self.assertIn(names[-1], ("response.completed", "response.incomplete"))
        self.assertEqual([d["sequence_number"] for _, d in events], list(range(len(events))))
        self.assertEqual("".join(d["delta"] for n, d in events if n == "response.output_text.delta"), text)

    # CORS --------------------------------------------------------------------------------------------------------

    def test_cors_preflight_allowed_and_refused(self):
        pre = {"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
        status, _ = self.server.request("OPTIONS", "/v1/chat/completions", headers=pre)  # no key: preflight
        self.assertEqual(status, 204)
        out = subprocess.run(["curl", "-sS", "-i", "-X", "OPTIONS", self.url + "/v1/chat/completions"]
                             + [a for k, v in pre.items() for a in ("-H", f"{k}: {v}")],
                             capture_output=True, text=True, timeout=60, check=True).stdout.lower()
        self.assertIn("access-control-allow-origin: " + ALLOWED, out)
        self.assertIn("access-control-allow-headers: authorization, content-type", out)
        self.assertIn("access-control-allow-methods:", out)
        refused = subprocess.run(["curl", "-sS", "-i", "-X", "OPTIONS", self.url + "/v1/chat/completions", "-H",
                                  "Origin: http://evil.example", "-H", "Access-Control-Request-Method: POST"],
                                 capture_output=True, text=True, timeout=60, check=True).stdout.lower()
        self.assertIn(" 403", refused.splitlines()[0])
        self.assertNotIn("access-control-allow-origin", refused)
        # The request itself: allowed origins get the header, refused ones a 403 and no generation.
        status, _ = self.server.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1},
                                        headers=dict(AUTH, Origin=ALLOWED))
        self.assertEqual(status, 200)
        before = self.server.metrics(AUTH)["tpc_generated_tokens_total"]
        status, out = self.server.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1},
                                          headers=dict(AUTH, Origin="http://evil.example"))
        self.assertEqual(status, 403)
        su.check_error_shape(out)
        self.assertEqual(self.server.metrics(AUTH)["tpc_generated_tokens_total"], before)


class ServeDropInStartup(unittest.TestCase):
    """Flags, switches and the template fallback: one short-lived server each."""

    def test_flags_and_switches(self):
        plan, name = su.test_plan()
        with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
            f.write("sk-from-file\n")
        try:
            with su.Server(plan, "-np", "1", "-c", "256", "--api-key-file", f.name, "--no-slots", "--no-webui",
                           "--temp", "0", "-n", "3", "--chat-template", "chatml") as s:
                key = {"Authorization": "Bearer sk-from-file"}
                self.assertEqual(s.request("GET", "/slots", headers=key)[0], 501)
                self.assertEqual(s.request("GET", "/metrics", headers=key)[0], 501)  # --metrics is off by default
                self.assertEqual(s.request("GET", "/", headers=key)[0], 404)
                status, got = s.post("/v1/completions", {"prompt": "Once upon a time", "return_tokens": True},
                                     headers=key)
                self.assertEqual(status, 200, got)
                # --temp 0 and -n 3 as the defaults: the greedy tokens, three of them at most.
                self.assertLessEqual(len(got["choices"][0]["tokens"]), 3)
                self.assertEqual(got["choices"][0]["tokens"], su.run_greedy(plan, "Once upon a time", 3)[
                    : len(got["choices"][0]["tokens"])])
        finally:
            os.unlink(f.name)
        # -m instead of the positional model; an unknown flag names itself and llama-server's refused ones.
        args = [su.TPC, "serve", "-m", plan, "--port", "0", "--flash-attn"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--flash-attn", out.stderr)
        self.assertIn("llama-server flags tpc serve does not take", out.stderr)

    def test_template_fallback_by_architecture(self):
        gguf = su.fixture("tiny-gemma3")
        if not gguf:
            self.skipTest("../shared is absent (tiny-gemma3 fixture)")
        plan = su.compile_plan(gguf, "tiny-gemma3")
        with su.Server(plan, "-np", "1", "-c", "512") as s:
            self.assertTrue(any("chat template gemma3" in l and "architecture 'gemma3'" in l for l in s.lines),
                            s.lines)
            status, got = s.post("/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
            self.assertEqual(status, 200, got)
            self.assertIn("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", got["prompt"])
            status, got = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 2})
            self.assertEqual(status, 200, got)

    def test_prompt_cache_on_a_sliding_window_plan(self):
        gguf = su.fixture("tiny-gemma3")
        if not gguf:
            self.skipTest("../shared is absent (tiny-gemma3 fixture)")
        plan = su.compile_plan(gguf, "tiny-gemma3")
        # Gemma 3's sliding-window layers keep rings of window + max_batch positions (8 + 512 here): a slot's
        # sequence can be cut back by at most ~max_batch positions, further the ring has overwritten what
        # the kept prefix would read, and the slot starts over.
        with su.Server(plan, "-np", "2", "-c", "4096") as s:
            def complete(prompt, **kw):
                body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "return_tokens": True, "ignore_eos": True}
                body.update(kw)
                status, got = s.post("/v1/completions", body)
                self.assertEqual(status, 200, got)
                return got["usage"]["prompt_tokens_details"]["cached_tokens"], got["choices"][0]["tokens"]

            long = [10 + (i * 37) % 480 for i in range(1200)]
            for prefix, want in ((1100, 1100), (100, 0)):  # a short cut back is kept, a long one is not
                complete(long, id_slot=0)
                prompt = long[:prefix] + [7, 8, 9]
                cached, warm = complete(prompt, id_slot=0)
                self.assertEqual(cached, want, prefix)
                self.assertEqual(warm, complete(prompt, id_slot=1, cache_prompt=False)[1], prefix)

    def test_prompt_cache_on_a_recurrent_plan(self):
        gguf = su.fixture("tiny-qwen35")
        if not gguf:
            self.skipTest("../shared is absent (tiny-qwen35 fixture)")
        plan = su.compile_plan(gguf, "tiny-qwen35")
        with su.Server(plan, "-np", "2", "-c", "1024") as s:
            self.assertTrue(any("recurrent" in l for l in s.lines), s.lines)

            def complete(prompt, **kw):
                body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "return_tokens": True, "ignore_eos": True}
                body.update(kw)
                status, got = s.post("/v1/completions", body)
                self.assertEqual(status, 200, got)
                return got

            p1 = list(range(10, 30))
            g1 = complete(p1, id_slot=0)["choices"][0]["tokens"]
            # The same prompt again would need a rewind of the state: nothing is kept.
            again = complete(p1, id_slot=0)
            self.assertEqual(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
            self.assertEqual(again["choices"][0]["tokens"], g1)
            # The whole previous sequence (prompt and evaluated tokens) as the prefix: kept, same tokens as cold.
            p2 = p1 + g1[:-1] + [40, 41, 42]
            warm = complete(p2, id_slot=0)
            self.assertEqual(warm["usage"]["prompt_tokens_details"]["cached_tokens"], len(p1) + len(g1) - 1)
            cold = complete(p2, id_slot=1, cache_prompt=False)
            self.assertEqual(warm["choices"][0]["tokens"], cold["choices"][0]["tokens"])


if __name__ == "__main__":
    if not shutil.which("curl"):
        su.skip("curl is not installed (scripts/install-deps.sh installs it)")
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
