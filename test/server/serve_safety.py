"""`tpc serve` safety: --api-key on every route but /health (and the static page), the body size limit,
every malformed request answered with a 4xx in OpenAI's error shape and nothing else changed, a client
that disconnects mid-stream freeing its slot at once, a slow reader not blocking other slots, and SIGTERM
draining in-flight streams before a clean exit."""
import json
import signal
import socket
import sys
import threading
import time
import unittest

import serve_util as su

KEY = "sk-test-secret"
AUTH = {"Authorization": "Bearer " + KEY}


def raw_stream_request(port, body, key=KEY):
    """A streaming completion on a raw socket (to disconnect or stop reading at will)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Authorization: Bearer {key}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_until(s, marker, limit=1 << 20):
    buf = b""
    while marker not in buf and len(buf) < limit:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


class ServeSafety(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "8192", "--api-key", KEY, "--max-body-bytes", "65536",
                               "--chat-template", "chatml", "--metrics")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def valid(self, **kw):
        body = {"prompt": [1, 5, 9], "max_tokens": 4, "temperature": 0, "return_tokens": True}
        body.update(kw)
        status, out = self.server.post("/v1/completions", body, headers=AUTH)
        self.assertEqual(status, 200, out)
        return out

    def test_api_key_on_every_route_but_health(self):
        s = self.server
        for method, path, body in [("GET", "/v1/models", None), ("GET", "/metrics", None),
                                   ("POST", "/v1/completions", {"prompt": "a"}),
                                   ("POST", "/v1/chat/completions", {"messages": []}),
                                   ("POST", "/tokenize", {"content": "a"}), ("POST", "/detokenize", {"tokens": []}),
                                   ("POST", "/completion", {"prompt": "a"}), ("GET", "/props", None),
                                   ("GET", "/slots", None), ("GET", "/models", None),
                                   ("POST", "/apply-template", {"messages": []}),
                                   ("POST", "/v1/messages", {"max_tokens": 1, "messages": []}),
                                   ("POST", "/v1/responses", {"input": "a"}),
                                   ("GET", "/no/such/route", None)]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                status, out = s.request(method, path, body, headers=headers)
                self.assertEqual(status, 401, (method, path, headers, out))
                su.check_error_shape(out)
                self.assertEqual(out["error"]["code"], "invalid_api_key")
                self.assertEqual(out["error"]["type"], "authentication_error")
        self.assertEqual(s.request("GET", "/health")[0], 200)
        self.assertEqual(s.request("GET", "/")[0], 200)  # the page itself: it sends the key it is given
        self.assertEqual(s.request("GET", "/v1/models", headers=AUTH)[0], 200)
        self.assertEqual(s.request("GET", "/v1/models", headers={"x-api-key": KEY})[0], 200)  # Anthropic's header
        self.assertEqual(s.request("GET", "/v1/models", headers={"x-api-key": "wrong"})[0], 401)

    def test_malformed_requests_change_nothing(self):
        s = self.server
        ref = self.valid()["choices"][0]["tokens"]
        before = s.metrics(AUTH)
        cases = [
            ("/v1/chat/completions", b"{not json", 400),
            ("/v1/chat/completions", b"[1,2,3]", 400),
            ("/v1/chat/completions", {}, 400),
            ("/v1/chat/completions", {"messages": "hello"}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 12}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400),
            ("/v1/completions", {"prompt": "a", "max_tokens": "many"}, 400),
            ("/v1/completions", {"prompt": [1] * 4097}, 400),  # longer than the context
            ("/v1/completions", {"prompt": "a", "max_tokens": 5000}, 400),
            ("/v1/completions", {"prompt": "a", "stop": 7}, 400),
            ("/v1/completions", {"prompt": "a", "n": 17}, 400),
            ("/v1/completions", {"prompt": "a", "logit_bias": {"99999999": 1}}, 400),
            ("/v1/completions", {"prompt": "a", "logit_bias": [[5, "x"]]}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "id_slot": 7}, 400),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "cache_prompt": 1}, 400),
            # llama-server's and the other APIs' routes (server/DropInRoutes.h).
            ("/completion", b"{not json", 400),
            ("/completion", {}, 400),
            ("/completion", {"prompt": "a", "n_predict": -7}, 400),
            ("/completion", {"prompt": ["a", "b"]}, 400),
            ("/completion", {"prompt": ["a", {}]}, 400),
            ("/completion", {"prompt": "a", "samplers": ["nope"]}, 400),
            ("/completion", {"prompt": [1] * 4097}, 400),
            ("/apply-template", {"messages": 3}, 400),
            ("/apply-template", b"[]", 400),
            ("/v1/messages", {"messages": [{"role": "user", "content": "x"}]}, 400),  # no max_tokens
            ("/v1/messages", {"max_tokens": 4, "messages": []}, 400),
            ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, 400),
            ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, 400),
            ("/v1/messages", {"max_tokens": -1, "messages": [{"role": "user", "content": "x"}]}, 400),
            ("/v1/messages", b"{", 400),
            ("/v1/messages/count_tokens", {"messages": 5}, 400),
            ("/v1/responses", {}, 400),
            ("/v1/responses", {"input": 5}, 400),
            ("/v1/responses", {"input": [{"role": "tool", "content": "x"}]}, 400),
            ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 400),
            ("/v1/responses", {"input": "x", "previous_response_id": "resp_1"}, 400),
            ("/v1/responses", {"input": "x", "max_output_tokens": 0}, 400),
            ("/v1/completions", {"prompt": None}, 400),
            ("/tokenize", {"content": 5}, 400),
            ("/detokenize", {"tokens": [-1]}, 400),
        ]
        for path, body, status in cases:
            got, out = s.post(path, body, headers=AUTH)
            self.assertEqual(got, status, (path, body, out))
            su.check_error_shape(out)
        got, out = s.post("/v1/completions", {"prompt": "x" * 70000}, headers=AUTH)
        self.assertEqual(got, 413, out)  # over --max-body-bytes: refused before any parsing
        su.check_error_shape(out)
        got, out = s.post("/v1/completions", {"prompt": [1] * 4097}, headers=AUTH)
        self.assertEqual(out["error"]["code"], "context_length_exceeded", out)
        after = s.metrics(AUTH)
        for key in ("tpc_generated_tokens_total", "tpc_prompt_tokens_total", "tpc_steps_total", "tpc_slots_busy"):
            self.assertEqual(after[key], before[key], key)
        self.assertEqual(self.valid()["choices"][0]["tokens"], ref)  # and the server still answers the same

    def test_context_overflow_is_a_400(self):
        status, out = self.server.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4094}, headers=AUTH)
        self.assertEqual(status, 400, out)
        self.assertEqual(out["error"]["code"], "context_length_exceeded")
        self.assertEqual(out["error"]["param"], "max_tokens")

    def test_disconnect_mid_stream_frees_the_slot(self):
        s = self.server
        before = s.metrics(AUTH)
        sock = raw_stream_request(s.port, {"prompt": [1, 5, 9], "max_tokens": 4000, "temperature": 0,
                                           "ignore_eos": True, "stream": True})
        first = read_until(sock, b"data: {")
        self.assertIn(b"200", first.split(b"\r\n")[0])
        sock.close()
        cancelled = 'tpc_requests_finished_total{reason="cancelled"}'
        t0 = time.time()
        su.wait_until(lambda: s.metrics(AUTH)[cancelled] == before[cancelled] + 1, 5, "the cancelled request")
        freed = time.time() - t0
        after = s.metrics(AUTH)
        self.assertEqual(after["tpc_slots_busy"], 0)
        generated = after["tpc_generated_tokens_total"] - before["tpc_generated_tokens_total"]
        self.assertLess(generated, 4000, "the generation ran to the end")
        print(f"slot freed {freed:.2f} s after the disconnect, {generated:.0f} tokens generated")
        self.valid()

    def test_slow_reader_does_not_block_other_slots(self):
        s = self.server
        sock = raw_stream_request(s.port, {"prompt": [1, 5, 9], "max_tokens": 3000, "temperature": 0,
                                           "ignore_eos": True, "stream": True})
        read_until(sock, b"data: {")  # then stop reading: its events queue up
        try:
            t0 = time.time()
            for _ in range(3):
                self.valid(max_tokens=8)
            self.assertLess(time.time() - t0, 60)
            self.assertEqual(s.metrics(AUTH)["tpc_slots_busy"], 1)  # the slow one is still generating
        finally:
            sock.close()
        su.wait_until(lambda: s.metrics(AUTH)["tpc_slots_busy"] == 0, 10, "the slow reader's slot")


class ServeDrain(unittest.TestCase):
    def test_sigterm_drains_streams_and_exits(self):
        # A model slow enough that the stream is still running when SIGTERM arrives (see slow_plan).
        server = su.Server(su.slow_plan(), "-np", "2", "-c", "1024")
        try:
            events = []
            started, done = threading.Event(), threading.Event()

            def client():
                events.extend(server.stream("/v1/completions", {"prompt": [1, 5, 9], "max_tokens": 300,
                                                                "temperature": 0, "ignore_eos": True, "stream": True},
                                            on_event=lambda e: started.set()))
                done.set()

            t = threading.Thread(target=client)
            t.start()
            self.assertTrue(started.wait(60), "no streamed event within 60 s")
            self.assertFalse(done.is_set(), "the stream ended before SIGTERM: the test model is too fast")
            server.proc.send_signal(signal.SIGTERM)
            su.wait_until(lambda: any("SIGTERM received" in l for l in server.lines), 10, "the drain message")
            refused = None
            try:
                refused = server.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}, timeout=10)
            except OSError:
                refused = (503, "listener already closed")
            self.assertEqual(refused[0], 503, refused)
            t.join(120)
            self.assertTrue(done.is_set())
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
            self.assertEqual(events[-2]["timings"]["predicted_n"], 300)
            server.proc.wait(60)
            self.assertEqual(server.proc.returncode, 0, server.lines)
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
