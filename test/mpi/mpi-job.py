"""Runs an MPI job (`mpirun ... tpc run ...`) and checks that it ends within a time bound, optionally after
killing one of its ranks mid-run: usage

    mpi-job.py --within SECONDS [--kill-rank R --after-bytes N] -- MPIRUN-COMMAND...

With --kill-rank, the job's stdout is read until it holds more than N bytes (rank 0 is streaming generated
text, so the ranks are mid-generation), then the process of rank R (found among the job's processes by
its OMPI_COMM_WORLD_RANK) gets SIGKILL, and the time is measured from the kill; without it, from the
start. Prints the job's stdout and stderr, then one line

    JOB-ENDED exit=<status> seconds=<time> within=<yes|no>

and exits 1 when the job did not end within the bound (it is then killed) or the rank was never found.
The caller FileChecks the output (the message naming the rank, the exit status).
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time


def descendants(pid):
    """Every process below pid (mpirun starts the ranks as its children)."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def rank_pid(job_pid, rank):
    for p in descendants(job_pid):
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return p
    return None


p = argparse.ArgumentParser()
p.add_argument("--within", type=float, required=True)
p.add_argument("--kill-rank", type=int)
p.add_argument("--after-bytes", type=int, default=0)
p.add_argument("cmd", nargs=argparse.REMAINDER)
a = p.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd

job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
out, err = bytearray(), bytearray()
enough = threading.Event()


def pump(stream, buf, watch):
    for chunk in iter(lambda: stream.read1(4096), b""):
        buf.extend(chunk)
        if watch and len(buf) > a.after_bytes:
            enough.set()
    if watch:  # the end of stdout: nothing more will come
        enough.set()


threads = [threading.Thread(target=pump, args=(job.stdout, out, True), daemon=True),
           threading.Thread(target=pump, args=(job.stderr, err, False), daemon=True)]
for t in threads:
    t.start()

problem = ""
t0 = time.monotonic()
if a.kill_rank is not None:
    if not enough.wait(120) or job.poll() is not None:
        problem = "the job ended (or printed nothing) before the kill"
    else:
        victim = None
        for _ in range(100):
            victim = rank_pid(job.pid, a.kill_rank)
            if victim:
                break
            time.sleep(0.05)
        if victim is None:
            problem = f"no process of rank {a.kill_rank} found"
        else:
            os.kill(victim, signal.SIGKILL)
            t0 = time.monotonic()
            print(f"KILLED rank {a.kill_rank} (pid {victim}) after {len(out)} bytes of output", flush=True)
try:
    status = job.wait(timeout=max(0.0, a.within - (time.monotonic() - t0)))
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    status = job.wait()
    problem = problem or f"the job did not end within {a.within} s"
seconds = time.monotonic() - t0
for t in threads:
    t.join(5)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.stdout.write(err.decode("utf-8", "replace"))
within = seconds <= a.within and not problem
print(f"\nJOB-ENDED exit={status} seconds={seconds:.2f} within={'yes' if within else 'no'}")
if problem:
    print(f"mpi-job: {problem}")
sys.exit(0 if within else 1)
