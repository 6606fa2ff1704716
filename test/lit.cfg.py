# lit configuration for tpc: FileCheck tests over tpc-opt and the tpc CLI.
import os
import shutil
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "TPC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tpc_obj_root, "test")

# Captures must not leak across CHECK-LABELs.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
# CPU sessions run CPUID's best kernel level, as before calibration existed, and write no cache file into
# the home of whoever runs the tests (runtime/cpu/KernelChoice.h); tools/cpu-calibrate.test sets its own.
config.environment["TPC_CPU_CALIBRATE"] = "0"
config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%shared", config.tpc_shared_dir))
config.substitutions.append(("%fixtures", os.path.join(config.tpc_shared_dir, "fixtures")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# Two `tpc run --dump-logits` runs of one model in two variants: same ids, logits within a tolerance.
config.substitutions.append(
    ("%{compare-runs}", sys.executable + " " + os.path.join(config.test_source_root, "common", "compare-runs.py")))

# Tests over ../shared say `REQUIRES: shared`; without it lit reports them UNSUPPORTED, and ctest runs
# them as lit-<folder>-shared, reported Skipped (test/CMakeLists.txt). Looked up when lit runs, as the
# GoogleTest suites do.
if os.path.isfile(os.path.join(config.tpc_shared_dir, "fixtures", "README.md")):
    config.available_features.add("shared")
elif lit_config.params.get("require_shared"):
    # lit-<folder>-shared found the fixtures before starting lit: all UNSUPPORTED would be a silent pass.
    lit_config.fatal(f"{config.tpc_shared_dir}/fixtures/README.md not found (require_shared)")

# Multi-process runs (test/mpi): %{mpirun} starts a job on this machine over shared memory, %{mpirun-tcp}
# over TCP on the loopback interface (the path a second host takes); both end after 120 s at most.
# Each test file's jobs keep Open MPI's session directory under their own %t.ompi: lit runs test files in
# parallel with one TMPDIR, and concurrent jobs sharing $TMPDIR/ompi.<host>.<uid> race on creating and
# removing it ("orte_init ... could not create session directory"). Config substitutions expand before %t.
if config.tpc_mpirun:
    config.available_features.add("mpi")
    mpirun = "timeout 120 " + config.tpc_mpirun + " --mca orte_tmpdir_base %t.ompi"
    config.substitutions.append(("%{mpirun-tcp}", mpirun + " --mca btl tcp,self"))
    config.substitutions.append(("%{mpirun}", mpirun))
    # Two ranks on two network-namespace "hosts" (test/mpi/two-hosts.sh): mpiexec alone (its lit flags pin
    # the TCP paths to the loopback interface), as root where namespaces can be made.
    # (no orte_tmpdir_base: two-hosts.sh gives mpirun and each host a session directory of its own)
    mpiexec = config.tpc_mpirun.split()[0] + " --allow-run-as-root --oversubscribe"
    config.substitutions.append(("%{two-hosts}", "timeout 120 bash " +
                                 os.path.join(config.test_source_root, "mpi", "two-hosts.sh")))
    config.substitutions.append(("%{mpiexec}", mpiexec))
    if os.geteuid() == 0 and shutil.which("ip"):
        probe = "tpclit%d" % os.getpid()  # lit suites configure in parallel: one probe name each
        if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
            config.available_features.add("netns")
    config.substitutions.append(("%{mpi-job}", sys.executable + " " + os.path.join(config.test_source_root, "mpi", "mpi-job.py")))

# Two CPU kernel levels to calibrate between (AVX2 and AVX-512 F/BW/VL/DQ: runtime/cpu/Calibration.h):
# tests of the calibration say `REQUIRES: cpu-calibrates`.
try:
    _flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    if all(f in _flags for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq")):
        config.available_features.add("cpu-calibrates")
except OSError:
    pass

# A CUDA build on a machine with an NVIDIA GPU (the driver's device node): tests of `--backend cuda` say
# `REQUIRES: cuda-gpu` and are UNSUPPORTED elsewhere.
if config.tpc_have_cuda in ("ON", "1", "TRUE") and os.path.exists("/dev/nvidia0"):
    config.available_features.add("cuda-gpu")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.tpc_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["tpc-opt", "tpc"], tool_dirs)

# Quantized KV caches (-ctk/-ctv, issue 37 part 1): the tests of what `--fit` does with them run where this
# tpc has them (test/compiler/fit-kv.test).
try:
    _help = subprocess.run([os.path.join(config.tpc_tools_dir, "tpc"), "compile", "--help"], capture_output=True,
                           text=True, timeout=60).stdout
    if "--cache-type-k" in _help:
        config.available_features.add("kv-cache-types")
except (OSError, subprocess.SubprocessError):
    pass
