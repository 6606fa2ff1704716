"""`tpc serve` with the official `openai` Python client: chat and completions, streamed and not, greedy
output equal to `tpc run --greedy`, usage, log-probabilities, models, and the client's error classes for
an unknown model, a bad max_tokens and a wrong API key. Runs in the venv made by make_venv.py (skipped
visibly when the client could not be installed)."""
import os
import sys

if os.environ.get("TPC_SERVE_VENV") and not sys.prefix.startswith(os.environ["TPC_SERVE_VENV"]):
    venv_python = os.path.join(os.environ["TPC_SERVE_VENV"], "bin", "python")
    if os.path.exists(venv_python):
        os.execv(venv_python, [venv_python, *sys.argv])

import unittest  # noqa: E402

import serve_util as su  # noqa: E402

try:
    import openai  # noqa: E402
except ImportError:
    su.skip("the openai client is not installed (the serve-venv test installs it from PyPI)")

KEY = "sk-openai-test"
PROMPT = "Once upon a time"


class ServeOpenAI(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "512", "--api-key", KEY, "--chat-template", "chatml")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key=KEY, timeout=120, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def test_models(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertEqual(ids, [self.name])

    def test_completion_greedy_equals_tpc_run(self):
        want = su.run_greedy(self.plan, PROMPT, 10)
        got = self.client.completions.create(model=self.name, prompt=PROMPT, max_tokens=10, temperature=0,
                                             extra_body={"return_tokens": True})
        choice = got.choices[0]
        tokens = choice.model_extra["tokens"]
        self.assertEqual(tokens, want[: len(tokens)])
        self.assertEqual(got.usage.completion_tokens, len(tokens))
        self.assertEqual(got.usage.total_tokens, got.usage.prompt_tokens + len(tokens))
        stream = self.client.completions.create(model=self.name, prompt=PROMPT, max_tokens=10, temperature=0,
                                                stream=True)
        self.assertEqual("".join(c.choices[0].text for c in stream), choice.text)

    def test_chat(self):
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]
        got = self.client.chat.completions.create(model=self.name, messages=messages, max_tokens=8, temperature=0)
        self.assertEqual(got.choices[0].message.role, "assistant")
        self.assertIn(got.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(got.usage.prompt_tokens, 10)
        stream = self.client.chat.completions.create(model=self.name, messages=messages, max_tokens=8,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
        text, usage, reasons = "", None, []
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                if c.finish_reason:
                    reasons.append(c.finish_reason)
        self.assertEqual(text, got.choices[0].message.content)
        self.assertEqual(reasons, [got.choices[0].finish_reason])
        self.assertEqual(usage.completion_tokens, got.usage.completion_tokens)

    def test_chat_logprobs_and_seeded_sampling(self):
        got = self.client.chat.completions.create(model=self.name, messages=[{"role": "user", "content": "Hi"}],
                                                  max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
        content = got.choices[0].logprobs.content
        self.assertEqual(len(content), got.usage.completion_tokens)
        self.assertEqual(len(content[0].top_logprobs), 2)
        self.assertAlmostEqual(content[0].logprob, content[0].top_logprobs[0].logprob, places=5)
        a, b = [self.client.completions.create(model=self.name, prompt=PROMPT, max_tokens=8, temperature=1.0,
                                               seed=1234).choices[0].text for _ in range(2)]
        self.assertEqual(a, b)

    def test_n_choices_role_chunk_and_cached_tokens(self):
        kw = dict(model="gpt-3.5-turbo-instruct", prompt=PROMPT, max_tokens=6, temperature=1.0, seed=9, n=3)
        a, b = self.client.completions.create(**kw), self.client.completions.create(**kw)
        self.assertEqual([c.index for c in a.choices], [0, 1, 2])
        self.assertEqual([c.text for c in a.choices], [c.text for c in b.choices])  # seeds respected
        messages = [{"role": "user", "content": "Tell me about the sea"}]
        stream = self.client.chat.completions.create(model=self.name, messages=messages, max_tokens=4,
                                                     temperature=0, stream=True)
        first = next(iter(stream))
        self.assertEqual(first.choices[0].delta.role, "assistant")
        self.assertIsNone(first.choices[0].delta.content)
        for _ in stream:
            pass
        # The same conversation again: its prompt comes from the slot's cache but the last token.
        got = self.client.chat.completions.create(model=self.name, messages=messages, max_tokens=4, temperature=0)
        cached = got.usage.prompt_tokens_details.cached_tokens
        self.assertEqual(cached, got.usage.prompt_tokens - 1)

    def test_responses_api(self):
        if not hasattr(self.client, "responses"):
            self.skipTest("this openai client has no Responses API")
        got = self.client.responses.create(model=self.name, input="Hello", instructions="Be brief.",
                                           max_output_tokens=5, temperature=0)
        self.assertEqual(got.object, "response")
        self.assertLessEqual(got.usage.output_tokens, 5)
        events = list(self.client.responses.create(model=self.name, input="Hello", instructions="Be brief.",
                                                   max_output_tokens=5, temperature=0, stream=True))
        self.assertEqual(events[0].type, "response.created")
        self.assertEqual("".join(e.delta for e in events if e.type == "response.output_text.delta"),
                         got.output_text)

    def test_errors_map_to_client_exceptions(self):
        # Any model name is served (llama-server does): the answer names the served model.
        got = self.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}],
                                                  max_tokens=2)
        self.assertEqual(got.model, self.name)
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.client.completions.create(model=self.name, prompt=PROMPT, max_tokens=-1)
        self.assertEqual(ctx.exception.body["param"], "max_tokens")
        bad = openai.OpenAI(base_url=self.server.url + "/v1", api_key="wrong", max_retries=0, timeout=30)
        with self.assertRaises(openai.AuthenticationError) as auth:
            bad.models.list()
        self.assertEqual(auth.exception.body["type"], "authentication_error")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
