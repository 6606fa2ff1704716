"""`tpc serve` endpoints with curl as the client: completions and chat, streamed and not, greedy output equal
to `tpc run --greedy`, stop strings, log-probabilities, tokenize/detokenize, models, health and metrics."""
import json
import shutil
import subprocess
import sys
import unittest

import serve_util as su

PROMPT = "Once upon a time"
N = 12


def curl(url, body=None, stream=False, headers=()):
    cmd = ["curl", "-sS", "--max-time", "120", url]
    if stream:
        cmd.insert(1, "-N")
    for h in headers:
        cmd += ["-H", h]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=150).stdout
    if not stream:
        return json.loads(out)
    events = [l[6:] for l in out.splitlines() if l.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in events]


class ServeApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "512", "--chat-template", "chatml", "--metrics")
        cls.url = cls.server.url

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def complete(self, **kw):
        body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "return_tokens": True}
        body.update(kw)
        return curl(self.url + "/v1/completions", body)

    def test_greedy_completion_equals_tpc_run(self):
        want = su.run_greedy(self.plan, PROMPT, N)
        got = self.complete()
        choice = got["choices"][0]
        self.assertEqual(choice["tokens"], want[: len(choice["tokens"])])
        self.assertEqual(len(choice["tokens"]), len(want) if choice["finish_reason"] == "length" else len(want) - 1)
        self.assertEqual(got["object"], "text_completion")
        self.assertEqual(got["model"], self.name)
        ids = curl(self.url + "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]
        self.assertEqual(got["usage"]["prompt_tokens"], len(ids))
        self.assertEqual(got["usage"]["completion_tokens"], len(choice["tokens"]))
        self.assertEqual(got["usage"]["total_tokens"], len(ids) + len(choice["tokens"]))
        text = curl(self.url + "/detokenize", {"tokens": choice["tokens"]})["content"]
        self.assertEqual(choice["text"].strip(), text.strip())

    def test_streamed_completion_equals_unstreamed(self):
        whole = self.complete()["choices"][0]
        events = curl(self.url + "/v1/completions",
                      {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}, stream=True)
        self.assertEqual(events[-1], "[DONE]")
        chunks = events[:-1]
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], len(whole["tokens"]))
        final = chunks[-2]
        self.assertEqual(final["choices"][0]["finish_reason"], whole["finish_reason"])
        text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
        self.assertEqual(text, whole["text"])
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))

    def test_chat_streamed_and_not(self):
        body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
                "max_tokens": 8, "temperature": 0}
        whole = curl(self.url + "/v1/chat/completions", body)
        self.assertEqual(whole["object"], "chat.completion")
        msg = whole["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        events = curl(self.url + "/v1/chat/completions", dict(body, stream=True), stream=True)
        self.assertEqual(events[-1], "[DONE]")
        deltas = [e["choices"][0]["delta"] for e in events[:-1]]
        self.assertEqual(deltas[0].get("role"), "assistant")
        self.assertEqual("".join(d.get("content", "") for d in deltas), msg["content"])
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"])
        # The prompt is the ChatML text: its token count matches /tokenize of that text.
        text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        ids = curl(self.url + "/tokenize", {"content": text, "add_special": True})["tokens"]
        self.assertEqual(whole["usage"]["prompt_tokens"], len(ids))

    def test_stop_string_cuts_the_text(self):
        whole = self.complete(max_tokens=24)["choices"][0]["text"]
        if len(whole) < 6:
            self.skipTest(f"greedy text too short for a stop string: {whole!r}")
        stop = whole[3:6]
        got = self.complete(max_tokens=24, stop=[stop])["choices"][0]
        self.assertEqual(got["text"], whole[: whole.find(stop)])
        self.assertEqual(got["finish_reason"], "stop")

    def test_logprobs(self):
        got = self.complete(logprobs=3)["choices"][0]
        lp = got["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(got["tokens"]))
        for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
            self.assertEqual(len(top), 3)
            self.assertLessEqual(chosen, 0.0)
            self.assertAlmostEqual(chosen, max(top.values()), places=5)  # greedy picks the most likely
        chat = curl(self.url + "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
                     "logprobs": True, "top_logprobs": 2})
        content = chat["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), chat["usage"]["completion_tokens"])
        self.assertEqual(len(content[0]["top_logprobs"]), 2)

    def test_models_health_metrics(self):
        models = curl(self.url + "/v1/models")
        self.assertEqual(models["object"], "list")
        self.assertEqual(models["data"][0]["id"], self.name)
        self.assertEqual(models["data"][0]["meta"]["n_ctx"], 256)
        self.assertEqual(curl(self.url + "/health")["status"], "ok")
        before = self.server.metrics()
        self.complete(max_tokens=5)
        key = 'tpc_requests_total{endpoint="/v1/completions",status="200"}'
        # httplib logs a request (our counter) after its response is written: let it land.
        su.wait_until(lambda: self.server.metrics().get(key, 0) >= before.get(key, 0) + 1, 5, "the request counter")
        after = self.server.metrics()
        self.assertEqual(after[key], before.get(key, 0) + 1)
        self.assertGreaterEqual(after["tpc_generated_tokens_total"] - before["tpc_generated_tokens_total"], 1)
        self.assertEqual(after["tpc_slots_total"], 2)
        self.assertEqual(after["tpc_slots_busy"], 0)
        self.assertGreater(after["tpc_decode_tokens_per_second"], 0)

    def test_tokenize_round_trip(self):
        ids = curl(self.url + "/tokenize", {"content": "Hello world", "add_special": True})["tokens"]
        if self.name == "tiny-llama":  # the fixture's tokens.json / `tpc tokenize` ids
            self.assertEqual(ids, [1, 354, 443, 290, 453, 368, 303])
            self.assertEqual(curl(self.url + "/detokenize", {"tokens": ids[1:]})["content"], "Hello world")
        pieces = curl(self.url + "/tokenize", {"content": "Hello world", "add_special": True,
                                               "with_pieces": True})["tokens"]
        self.assertEqual([p["id"] for p in pieces], ids)

if __name__ == "__main__":
    if not shutil.which("curl"):
        su.skip("curl is not installed (scripts/install-deps.sh installs it)")
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
