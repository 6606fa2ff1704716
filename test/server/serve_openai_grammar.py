"""Structured output through the official `openai` client: response_format with a hand-written json_schema,
and `chat.completions.parse` with pydantic models (the schemas real applications send: $defs and $ref for
nested models, Literal enums, Optional as anyOf with null, titles, additionalProperties false), whose
answers the client parses back into the models; an unsupported keyword comes back as the client's
BadRequestError. Runs in the venv made by make_venv.py (skipped visibly when the client could not be
installed)."""
import os
import sys

if os.environ.get("TPC_SERVE_VENV") and not sys.prefix.startswith(os.environ["TPC_SERVE_VENV"]):
    venv_python = os.path.join(os.environ["TPC_SERVE_VENV"], "bin", "python")
    if os.path.exists(venv_python):
        os.execv(venv_python, [venv_python, *sys.argv])

import json  # noqa: E402
import unittest  # noqa: E402
from typing import List, Literal, Optional  # noqa: E402

import serve_util as su  # noqa: E402

try:
    import openai  # noqa: E402
    import pydantic  # noqa: E402  (installed with openai)
except ImportError:
    su.skip("the openai client is not installed (the serve-venv test installs it from PyPI)")


class Address(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=12)
    zip_code: Optional[int]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    age: int = pydantic.Field(ge=0, le=120)
    role: Literal["admin", "user", "guest"]
    address: Address
    tags: List[Literal["a", "b"]] = pydantic.Field(max_length=3)


class ServeOpenAIGrammar(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plan, cls.name = su.test_plan()
        if cls.name == "tiny-demo":
            su.skip("needs the tiny-llama fixture (../shared): the repository's tiny-demo has a 16-token "
                    "vocabulary that cannot spell JSON")
        cls.server = su.Server(cls.plan, "-np", "2", "-c", "2048", "--chat-template", "chatml")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="none", timeout=120, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.lines

    def test_json_schema_response_format(self):
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 9}},
                  "required": ["ok", "n"], "additionalProperties": False}
        r = self.client.chat.completions.create(
            model=self.name, messages=[{"role": "user", "content": "JSON"}], temperature=0, max_tokens=200,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
        value = json.loads(r.choices[0].message.content)
        self.assertEqual(set(value), {"ok", "n"})
        self.assertIsInstance(value["ok"], bool)
        self.assertTrue(1 <= value["n"] <= 9)
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_parse_pydantic_models(self):
        for seed in range(4):
            r = self.client.beta.chat.completions.parse(
                model=self.name, messages=[{"role": "user", "content": "A person, please."}], max_tokens=600,
                temperature=0.7, seed=seed, response_format=Person)
            person = r.choices[0].message.parsed
            self.assertIsInstance(person, Person, r.choices[0].message.content)
            self.assertTrue(0 <= person.age <= 120)
            self.assertIsInstance(person.address, Address)

    def test_unsupported_keyword_is_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(
                model=self.name, messages=[{"role": "user", "content": "JSON"}], max_tokens=8,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": {"day": {"type": "string", "format": "date"}}}}})
        self.assertIn("'format' is not supported at #/properties/day", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
