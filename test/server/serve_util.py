"""Shared helpers of the `tpc serve` end-to-end tests (run by ctest, see CMakeLists.txt).

Plans are compiled once per build tree (atomically, tests may run in parallel). A Server starts
`tpc serve PLAN --port 0` on 127.0.0.1, reads the port from its "listening on" line and is always
stopped by the test (SIGTERM, then SIGKILL after a bound). Every network call has a timeout.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

TPC = os.environ.get("TPC_BIN", "tpc")
SHARED = os.environ.get("TPC_SHARED_DIR", "")
SOURCE = os.environ.get("TPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
WORK = os.environ.get("TPC_SERVE_WORK", "/tmp/tpc-serve-work")
VENV = os.environ.get("TPC_SERVE_VENV", "")


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


def fixture(name):
    """Path of a shared fixture GGUF, or None when ../shared is absent."""
    path = os.path.join(SHARED, "fixtures", name + ".gguf")
    return path if SHARED and os.path.exists(path) else None


def compile_plan(gguf, name, devices=1):
    """`tpc compile` once per build tree; returns the plan path."""
    os.makedirs(WORK, exist_ok=True)
    plan = os.path.join(WORK, f"{name}-d{devices}.plan")
    if not os.path.exists(plan):
        tmp = f"{plan}.{os.getpid()}.tmp"
        subprocess.run([TPC, "compile", gguf, "--devices", str(devices), "-o", tmp], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        os.replace(tmp, plan)
    return plan


def test_plan():
    """The tiny-llama fixture plan (2 devices) when ../shared is there, else the repository's tiny-demo."""
    gguf = fixture("tiny-llama")
    if gguf:
        return compile_plan(gguf, "tiny-llama", devices=2), "tiny-llama"
    print("note: ../shared is absent; using examples/models/tiny-demo.gguf")
    return compile_plan(os.path.join(SOURCE, "examples", "models", "tiny-demo.gguf"), "tiny-demo"), "tiny-demo"


def slow_plan():
    """A plan whose tokens take milliseconds, not microseconds, so a test can act while a stream runs
    (the fixtures and tiny-demo generate 300 tokens faster than a poll): one layer of `tpc synth`'s
    bench-llama (50 MB, Q8_0), 2 devices. Needs neither ../shared nor the network."""
    os.makedirs(WORK, exist_ok=True)
    gguf = os.path.join(WORK, "bench-llama-1layer.gguf")
    if not os.path.exists(gguf):
        tmp = f"{gguf}.{os.getpid()}.tmp"
        subprocess.run([TPC, "synth", "--preset", "bench-llama", "--layers", "1", "--type", "Q8_0", "-o", tmp],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        os.replace(tmp, gguf)
    return compile_plan(gguf, "bench-llama-1layer", devices=2)


def run_greedy(plan, prompt, n):
    """Token ids `tpc run --greedy` generates for `prompt`."""
    out = subprocess.run([TPC, "run", plan, "-p", prompt, "-n", str(n), "--greedy", "-t", "1"], check=True,
                         capture_output=True, timeout=300).stdout.decode("utf-8", "replace")
    m = re.search(r"generated ids: ([0-9,]*)", out)
    assert m, out
    return [int(x) for x in m.group(1).split(",") if x]


class Server:
    """A `tpc serve` process on 127.0.0.1 and a free port (see the module comment)."""

    def __init__(self, plan, *args, timeout=120):
        self.args = [TPC, "serve", plan, "--host", "127.0.0.1", "--port", "0", "-t", "1", *args]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not ready.wait(timeout) or self.port is None:
            self.kill()
            raise RuntimeError("tpc serve did not start: " + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self, timeout=60):
        """SIGTERM (drain), SIGKILL past `timeout`; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reader.join(5)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, parsed JSON or text) of one request on a fresh connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=data, headers=h)
            res = conn.getresponse()
            raw = res.read().decode("utf-8", "replace")
            try:
                return res.status, json.loads(raw)
            except ValueError:
                return res.status, raw
        finally:
            conn.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body, headers=None, timeout=120, on_event=None):
        """The parsed `data:` events of a streamed response ("[DONE]" kept as the string); `on_event(event)`
        is called as each one arrives."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request("POST", path, body=json.dumps(body), headers=h)
            res = conn.getresponse()
            assert res.status == 200, (res.status, res.read())
            assert res.getheader("Content-Type", "").startswith("text/event-stream"), res.getheaders()
            events = []
            for raw in res:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data: "):
                    data = line[6:]
                    events.append(data if data == "[DONE]" else json.loads(data))
                    if on_event:
                        on_event(events[-1])
            return events
        finally:
            conn.close()

    def metrics(self, headers=None):
        status, text = self.request("GET", "/metrics", headers=headers)
        assert status == 200, (status, text)
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def check_error_shape(body):
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}}."""
    assert isinstance(body, dict) and "error" in body, body
    err = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in err, (key, body)
    assert isinstance(err["message"], str) and err["message"], body
