"""Structured output end to end: `tpc serve` with response_format (json_schema, json_object), llama-server's
`json_schema` and `grammar` fields, on a test plan (the tiny-llama fixture, or tiny-demo without ../shared;
its vocabulary is SentencePiece with byte tokens), with the argument `bpe` on the tiny-qwen3 fixture
(byte-level BPE), and with `gemma` on Gemma 3 270M ($TPC_GEMMA_GGUF, which CMake points at `make demo`'s
download; skipped visibly when it is not there).

50 random schemas from a seeded generator (nested objects, enums, arrays, optional fields, type arrays,
anyOf, integer ranges) run at -np 4, four at a time next to plain requests: every response parses and validates against its
schema with Python's jsonschema (skipped visibly without python3-jsonschema) and ends with "stop" (the
grammar completes and ends the generation); plain requests running beside them give the same ids as alone.
Strings and arrays in the generated schemas are bounded, so every valid output fits max_tokens.
"""
import concurrent.futures
import json
import os
import random
import re
import sys
import unittest

import serve_util as su

try:
    import jsonschema
except ImportError:  # pragma: no cover - the test is skipped
    jsonschema = None

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "plain"
GEMMA = VARIANT == "gemma"
NAMES = ["name", "age", "city", "tags", "score", "active", "kind", "id", "note", "items", "size", "color"]


def random_schema(rng, depth=0):
    """A schema whose every valid instance is bounded in length."""
    kinds = ["string", "integer", "number", "boolean", "enum", "nullable", "anyof", "range"]
    if depth < 2:
        kinds += ["array", "object", "object"]
    k = rng.choice(kinds)
    if k == "string":
        s = {"type": "string", "maxLength": rng.randint(1, 8)}
        if rng.random() < 0.3:
            s["minLength"] = 1
        return s
    if k in ("integer", "number", "boolean"):
        return {"type": k}
    if k == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "a b", 1, 2, None], rng.randint(1, 4))}
    if k == "nullable":
        return {"type": ["string", "null"], "maxLength": 5}
    if k == "range":
        lo = rng.randint(-50, 500)
        s = {"type": "integer", "minimum": lo, "maximum": lo + rng.choice([0, 3, 42, 999])}
        if rng.random() < 0.3:
            s = {"type": "integer", "exclusiveMinimum": lo}
        return s
    if k == "anyof":
        return {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 4}]}
    if k == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
    return random_object(rng, depth + 1)


def random_object(rng, depth=0):
    names = rng.sample(NAMES, rng.randint(1, 4))
    props = {n: random_schema(rng, depth) for n in names}
    required = [n for n in names if rng.random() < 0.6]
    s = {"type": "object", "properties": props, "required": required}
    if rng.random() < 0.7:
        s["additionalProperties"] = False
    if rng.random() < 0.3:
        s["title"] = "T"  # an annotation: ignored
    return s


def gemma_gguf():
    path = os.environ.get("TPC_GEMMA_GGUF", "")
    return path if path and os.path.exists(path) else None


class ServeGrammar(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if GEMMA:
            gguf = gemma_gguf()
            if not gguf:
                su.skip("Gemma 3 270M not found (set TPC_GEMMA_GGUF or run `make demo`)")
            cls.plan = su.compile_plan(gguf, "gemma-3-270m")
            cls.server = su.Server(cls.plan, "-np", "4", "-c", "8192", "--metrics", "--chat-template", "gemma3")
        else:
            if VARIANT == "bpe":  # a byte-level BPE vocabulary (the default plan's is SentencePiece)
                gguf = su.fixture("tiny-qwen3")
                if not gguf:
                    su.skip("../shared is absent (the tiny-qwen3 fixture)")
                cls.plan = su.compile_plan(gguf, "tiny-qwen3")
            else:
                cls.plan, cls.name = su.test_plan()
                if cls.name == "tiny-demo":
                    su.skip("needs the tiny-llama fixture (../shared): the repository's tiny-demo has a 16-token "
                            "vocabulary that cannot spell JSON")
            cls.server = su.Server(cls.plan, "-np", "4", "-c", "4096", "--metrics", "--chat-template", "chatml")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def chat(self, content, **kw):
        body = {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 800}
        body.update(kw)
        status, out = self.server.post("/v1/chat/completions", body, timeout=300)
        self.assertEqual(status, 200, out)
        return out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]

    def complete(self, prompt, **kw):
        body = {"prompt": prompt, "temperature": 0, "max_tokens": 800}
        body.update(kw)
        status, out = self.server.post("/v1/completions", body, timeout=300)
        self.assertEqual(status, 200, out)
        return out["choices"][0]["text"], out["choices"][0]["finish_reason"]

    def constrained(self, i, schema):
        """Request i of the random set: the form of the constraint and the endpoint rotate."""
        # The fixture models have random weights: a short prompt leaves the context to the output.
        prompt = "Reply with a JSON object for this schema: " + json.dumps(schema) if GEMMA else "JSON:"
        form = i % 3
        kw = {"seed": i}
        if i % 4 == 3:
            kw.update(temperature=0.8)  # the stochastic path under a grammar
        if form == 0:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": f"s{i}", "strict": True, "schema": schema}}
        elif form == 1:
            kw["json_schema"] = schema
        else:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}
        return self.chat(prompt, **kw) if GEMMA or i % 2 == 0 else self.complete(prompt, **kw)

    def test_random_schemas_validate(self):
        if jsonschema is None:
            self.skipTest("python3-jsonschema is not installed (scripts/install-deps.sh installs it)")
        rng = random.Random(31)
        schemas = [random_object(rng) for _ in range(50)]
        before = self.server.metrics()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda a: self.constrained(*a), enumerate(schemas)))
        for i, (schema, (text, reason)) in enumerate(zip(schemas, results)):
            with self.subTest(i=i, schema=schema, text=text):
                self.assertEqual(reason, "stop")
                value = json.loads(text)
                jsonschema.validate(value, schema)
        after = self.server.metrics()
        self.assertGreater(after["tpc_grammar_tokens_total"], before["tpc_grammar_tokens_total"])
        print(f"grammar: {after['tpc_grammar_tokens_total'] - before['tpc_grammar_tokens_total']:.0f} tokens, "
              f"{after['tpc_grammar_masks_total'] - before['tpc_grammar_masks_total']:.0f} masks")

    def test_json_object_and_stream(self):
        # A prompt Gemma answers briefly (greedy on "Describe a cat as JSON." lists keys until max_tokens).
        text, reason = self.chat("Reply with a JSON object with the keys ok (a boolean) and n (a number).",
                                 response_format={"type": "json_object"}, max_tokens=300)
        if reason == "length":
            # Any object has unbounded strings and keys: a random-weight fixture, and Gemma's greedy text too
            # (it changed from a short object to a long list of keys with the exact VNNI q8_0 sums), may
            # fill max_tokens inside one. The bounded schema below must stop. The cut text must still be the
            # start of a JSON object: the parser runs out of input (at the end, or inside the last string),
            # never meets a wrong character before it.
            self.assertTrue(text.startswith("{"), text)
            try:
                self.assertIsInstance(json.loads(text), dict) # closed on the very last token
            except json.JSONDecodeError as e:
                self.assertTrue(e.msg.startswith("Unterminated string") or e.pos >= len(text.rstrip()),
                                f"{e} in {text!r}")
        else:
            self.assertEqual(reason, "stop", text)
            self.assertIsInstance(json.loads(text), dict)
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
                  "required": ["ok", "n"], "additionalProperties": False}
        events = self.server.stream("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Answer in JSON."}], "temperature": 0, "max_tokens": 200,
            "stream": True, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        self.assertEqual(events[-1], "[DONE]")
        streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "stop")
        value = json.loads(streamed)
        self.assertEqual(set(value), {"ok", "n"})
        self.assertIn(value["n"], [1, 2, 3])

    def test_gbnf_grammar(self):
        text, reason = self.complete("Is water wet? Answer:", grammar='root ::= " " ("yes" | "no")\n')
        self.assertIn(text, (" yes", " no"))
        self.assertEqual(reason, "stop")
        grammar = 'root ::= [0-9]{3} "-" [a-c]{1,5} "."\n'
        text, reason = self.chat("Write a code.", grammar=grammar, temperature=1.0, seed=5)
        self.assertRegex(text, r"^[0-9]{3}-[a-c]{1,5}\.$")
        self.assertEqual(reason, "stop")

    def test_bad_schema_or_grammar_is_400(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}}}}},
             "response_format.json_schema.schema", "'pattern' is not supported at #/properties/zip"),
            ({"json_schema": {"type": "number", "minimum": 0}}, "json_schema", "'minimum' on a number"),
            ({"grammar": "root ::= item\n"}, "grammar", "line 1, column 10: undefined rule 'item'"),
            ({"grammar": "root ::= root \"a\"\n"}, "grammar", "left-recursive"),
            ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
        ]
        for extra, param, words in cases:
            for path in ("/v1/chat/completions", "/v1/completions"):
                body = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
                body.update(extra)
                status, out = self.server.post(path, body)
                with self.subTest(path=path, param=param):
                    self.assertEqual(status, 400, out)
                    su.check_error_shape(out)
                    self.assertEqual(out["error"]["param"], param)
                    self.assertIn(words, out["error"]["message"])

    def test_batched_with_plain_requests(self):
        """Constrained and plain requests share the batched engine: the plain ones equal their solo run (on
        the fixture plans), the constrained ones validate."""
        prompts = ["Once upon a time", "The capital of France is", "1, 2, 3,"]
        solo = [self.complete(p, max_tokens=24, return_tokens=True)[0] for p in prompts]
        schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 6}},
                  "required": ["a", "b"], "additionalProperties": False}

        def job(k):
            if k % 2 == 0:
                return ("plain", k // 2, self.complete(prompts[k // 2], max_tokens=24, return_tokens=True)[0])
            return ("json", k, self.chat("JSON please", response_format={
                "type": "json_schema", "json_schema": {"name": "ab", "schema": schema}})[0])

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            out = list(pool.map(job, range(6)))
        for kind, k, text in out:
            if kind == "plain" and not GEMMA:
                self.assertEqual(text, solo[k])
            elif kind == "plain":
                # Gemma's Q4_K matmuls round differently in a batch of several rows than alone, so greedy
                # text may part from the solo run after a while (the fixtures' test above is exact).
                self.assertTrue(text)
            else:
                value = json.loads(text)
                self.assertEqual(set(value), {"a", "b"})
                self.assertIsInstance(value["a"], int)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
