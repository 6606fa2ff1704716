#!/usr/bin/env python3
"""Peak memory of one process, and what it was made of at its peak: a wrapper around a command.

    bench/mpi/rank_rss.py [--label NAME] [--top 8] [--by-mapping] -- COMMAND ARGS...
    mpirun -np 2 --bind-to none python3 bench/mpi/rank_rss.py --label rank -- build/bin/tpc run plan.bin ...

Starts COMMAND, samples /proc/PID/smaps every 20 ms, and when it exits prints one line: the label (with
the MPI rank when a launcher set OMPI_COMM_WORLD_RANK), VmHWM (the kernel's peak RSS), and at the sampled
peak the anonymous and file-backed RSS with the --top largest mappings by RSS (path or [anon], MiB; with
--by-mapping each mapping alone, with its addresses, permissions and size). Under
mpirun each rank runs its own wrapper, so every rank is measured alone. A benchmark tool: asserts nothing.
"""
import argparse
import os
import subprocess
import sys
import time


def sample(pid, by_mapping=False):
    """{mapping name: [rss KiB, anon KiB]} of pid (by_mapping: one entry per mapping, keyed by its address
    range, permissions and name), or None when it is gone."""
    try:
        text = open(f"/proc/{pid}/smaps").read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    maps, name = {}, None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not parts[0].endswith(":") or "-" in parts[0]:
            name = parts[5] if len(parts) > 5 else "[anon]"
            if by_mapping:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                name = f"{parts[0]} {parts[1]} {(hi - lo) / 2**20:.1f}M {name}"
            maps.setdefault(name, [0, 0])
        elif parts[0] == "Rss:":
            maps[name][0] += int(parts[1])
        elif parts[0] == "Anonymous:":
            maps[name][1] += int(parts[1])
    return maps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="process")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--by-mapping", action="store_true", help="list single mappings, not names")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    proc = subprocess.Popen(cmd)
    best, best_rss, hwm = None, -1, 0
    while proc.poll() is None:
        m = sample(proc.pid, a.by_mapping)
        try:
            for line in open(f"/proc/{proc.pid}/status"):
                if line.startswith("VmHWM:"):
                    hwm = max(hwm, int(line.split()[1]))
        except OSError:
            pass
        if m:
            rss = sum(v[0] for v in m.values())
            if rss > best_rss:
                best, best_rss = m, rss
        time.sleep(0.02)
    rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    label = a.label + (f" {rank}" if rank is not None else "")
    anon = sum(v[1] for v in best.values()) if best else 0
    top = sorted(best.items(), key=lambda kv: -kv[1][0])[: a.top] if best else []
    where = ", ".join(f"{k if a.by_mapping else os.path.basename(k) or k} {v[0] / 1024:.1f} (anon {v[1] / 1024:.1f})"
                      for k, v in top)
    print(f"{label}: VmHWM {hwm / 1024:.0f} MiB; at the sampled peak {best_rss / 1024:.0f} MiB = anon "
          f"{anon / 1024:.0f} + file {(best_rss - anon) / 1024:.0f} MiB; largest: {where}", file=sys.stderr)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
