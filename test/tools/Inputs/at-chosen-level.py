"""Runs a command at the CPU kernel level an earlier `tpc run` chose: usage

    at-chosen-level.py RUN.err -- tpc run ...

RUN.err holds the earlier run's stderr, whose summary line names the level ("kernels avx2 (calibrated: ...").
The command runs with TPC_CPU_ISA set to that level (lit's shell has no command substitution), its output
passed through; exits with the command's status, or 1 with one line when RUN.err names no level.
"""
import os
import re
import subprocess
import sys

err, sep, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
if sep != "--" or not cmd:
    sys.exit("usage: at-chosen-level.py RUN.err -- command ...")
m = re.search(r"kernels (scalar|avx2|avx512|avx512vnni) \(", open(err, encoding="utf-8", errors="replace").read())
if not m:
    sys.exit(f"at-chosen-level: {err} names no kernel level")
env = dict(os.environ, TPC_CPU_ISA=m.group(1))
print(f"at-chosen-level: TPC_CPU_ISA={m.group(1)}", file=sys.stderr)
sys.exit(subprocess.run(cmd, env=env).returncode)
