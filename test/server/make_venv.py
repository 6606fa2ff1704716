"""ctest fixture: a virtual environment under the build tree with the official `openai` client from PyPI.

Created once and reused. Without network (or PyPI) it prints why and succeeds anyway: the tests that
need the client then skip visibly, the others run."""
import os
import subprocess
import sys

venv = os.environ["TPC_SERVE_VENV"]
python = os.path.join(venv, "bin", "python")


def has_openai():
    return os.path.exists(python) and subprocess.run([python, "-c", "import openai"],
                                                     capture_output=True).returncode == 0


if has_openai():
    print(f"{venv}: openai already installed")
    sys.exit(0)
try:
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai"],
                   check=True, timeout=500)
except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
    print(f"could not install the openai client into {venv} ({e}); its tests will be skipped")
    sys.exit(0)
print(f"{venv}: openai installed" if has_openai() else f"{venv}: openai did not import; its tests will skip")
