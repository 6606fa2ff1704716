"""`tpc serve -np 4` under 8 concurrent clients x 25 requests each: every request answered, no error, and
each greedy sequence equal to the same request's output when it ran alone (so sequences never see each
other's cache). Half the requests stream. Bounded: every request has a timeout, the whole run a deadline."""
import sys
import threading
import time
import unittest

import serve_util as su

CLIENTS, REQUESTS = 8, 25
PROMPTS = []  # 10 distinct prompts of 4..12 token ids, made once the vocabulary size is known


def make_prompts(vocab):
    span = max(2, min(200, vocab - 3))
    PROMPTS[:] = [[1] + [3 + (7 * k + 3 * i) % span for i in range(4 + k % 9)] for k in range(10)]


def body(k, stream):
    return {"prompt": PROMPTS[k], "max_tokens": 6 + k % 5, "temperature": 0, "return_tokens": True,
            "stream": stream}


def tokens_of(server, k, stream):
    if not stream:
        status, out = server.post("/v1/completions", body(k, False), timeout=120)
        assert status == 200, out
        return out["choices"][0]["tokens"], out["choices"][0]["finish_reason"]
    events = server.stream("/v1/completions", body(k, True), timeout=120)
    assert events[-1] == "[DONE]", events[-3:]
    ids = [t for e in events[:-1] for t in e["choices"][0].get("tokens", [])]
    return ids, events[-2]["choices"][0]["finish_reason"]


class ServeConcurrency(unittest.TestCase):
    def test_eight_clients_four_slots(self):
        plan, _ = su.test_plan()
        with su.Server(plan, "-np", "4", "-c", "512", "-b", "32", "--metrics") as server:
            make_prompts(server.request("GET", "/v1/models")[1]["data"][0]["meta"]["n_vocab"])
            alone = [tokens_of(server, k, False) for k in range(len(PROMPTS))]
            errors, results = [], []
            lock = threading.Lock()

            def client(c):
                for r in range(REQUESTS):
                    k = (c * 7 + r) % len(PROMPTS)
                    try:
                        got = tokens_of(server, k, (c + r) % 2 == 1)
                        with lock:
                            results.append((c, r, k, got))
                    except Exception as e:  # noqa: BLE001 - every failure is reported below
                        with lock:
                            errors.append((c, r, repr(e)))

            t0 = time.time()
            threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(540)
            elapsed = time.time() - t0
            self.assertFalse(any(t.is_alive() for t in threads), "clients still running at the deadline")
            self.assertEqual(errors, [])
            self.assertEqual(len(results), CLIENTS * REQUESTS)
            for c, r, k, got in results:
                self.assertEqual(got, alone[k], f"client {c} request {r} (prompt {k})")
            # httplib logs a request (our counter) after its response is written: let the last ones land.
            key = 'tpc_requests_total{endpoint="/v1/completions",status="200"}'
            want = CLIENTS * REQUESTS + len(PROMPTS)
            su.wait_until(lambda: server.metrics().get(key, 0) >= want, 5, "the request counter")
            m = server.metrics()
            self.assertEqual(m[key], want)
            self.assertEqual(m["tpc_slots_busy"], 0)
            self.assertEqual(m["tpc_requests_queued"], 0)
            # Batches held several sequences at once: more batch tokens than steps.
            self.assertGreater(m["tpc_batch_tokens_total"], 1.5 * m["tpc_steps_total"])
            print(f"{CLIENTS * REQUESTS} requests in {elapsed:.1f} s; "
                  f"{m['tpc_batch_tokens_total'] / m['tpc_steps_total']:.2f} tokens per step")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
