#!/usr/bin/env bash
# Issue 33's benchmark: a model over two network-namespace "hosts" (test/mpi/two-hosts.sh) at a link speed
# limit, in the shapes a user with two hosts can pick, against the same plan in one process:
#   tp-f32   2 ranks, every layer split over both hosts, f32 all-reduce payloads
#   tp-bf16  the same plan with --comm-dtype bf16 at run time
#   pp       2 stages x 1 device (--stages 2): half the layers on each host, one hidden state per boundary
# For each: `tpc run --bench -pp PP -tg TG --json` (1 thread per rank: the ranks share this machine's cores),
# the bytes each host sent (veth counters, from two-hosts.sh) and the plan's own traffic estimate
# (`tpc compile --report`'s collective / stage-transfer bytes per token).
#   bench/mpi/two-hosts-bench.sh MODEL.gguf OUTDIR [RATES...]     (RATES default: 1gbit 10gbit)
# Needs root (namespaces), iproute2 and Open MPI; ROUNDS (default 2) alternates the shapes per round.
set -euo pipefail
model=${1:?usage: two-hosts-bench.sh MODEL.gguf OUTDIR [RATES...]}
out=${2:?usage: two-hosts-bench.sh MODEL.gguf OUTDIR [RATES...]}
shift 2
rates=${*:-1gbit 10gbit}
here=$(cd "$(dirname "$0")/../.." && pwd)
tpc=${TPC:-$here/build/bin/tpc}
pp=${PP:-128} tg=${TG:-32} rounds=${ROUNDS:-2}
# --bind-to none: the two "hosts" are one machine, and each host's daemon binds its rank to its own first
# core, i.e. both ranks to core 0 (measured: 4x slower, whatever the link).
mpiexec="mpiexec --allow-run-as-root --oversubscribe --bind-to none"
mkdir -p "$out"
"$tpc" compile "$model" --devices 2 -o "$out/tp.plan" --report > "$out/tp.report" 2>&1
"$tpc" compile "$model" --devices 2 --stages 2 -o "$out/pp.plan" --report > "$out/pp.report" 2>&1
run() { # NAME PLAN [flags]: one rank on each host
  local name=$1 plan=$2
  shift 2
  TPC_NETNS_RATE=$rate timeout 600 bash "$here/test/mpi/two-hosts.sh" "$out/hosts-$name" "$mpiexec" -- \
    "$tpc" run "$plan" --bench -pp "$pp" -tg "$tg" -r 1 -t 1 --json --no-progress "$@" \
    > "$out/$rate-$name-$r.json" 2> "$out/$rate-$name-$r.err" || echo "$name at $rate: failed (see $out/$rate-$name-$r.err)"
}
for rate in $rates; do
  for r in $(seq "$rounds"); do
    "$tpc" run "$out/tp.plan" --bench -pp "$pp" -tg "$tg" -r 1 -t 1 --json --no-progress > "$out/$rate-one-$r.json" 2>/dev/null
    run tp-f32 "$out/tp.plan"
    run tp-bf16 "$out/tp.plan" --comm-dtype bf16
    run pp "$out/pp.plan"
  done
done
python3 - "$out" $rates <<'PY'
import glob, json, os, re, statistics, sys
out, rates = sys.argv[1], sys.argv[2:]
def ts(path, test):
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return None
    for r in rows:
        if r.get("test", "").startswith(test):
            return r.get("avg_ts")
def sent(path):
    try:
        return sum(int(m) for m in re.findall(r"sent (\d+) bytes", open(path).read()))
    except OSError:
        return None
print("| link | shape | pp t/s | tg t/s | pp / one process | tg / one process | bytes on the wire (both hosts) |")
print("|---|---|---:|---:|---:|---:|---:|")
for rate in rates:
    def med(name, test):
        v = [x for f in sorted(glob.glob(f"{out}/{rate}-{name}-*.json")) if (x := ts(f, test))]
        return statistics.median(v) if v else None
    onep, onet = med("one", "pp"), med("one", "tg")
    for name in ("one", "tp-f32", "tp-bf16", "pp"):
        p, t = med(name, "pp"), med(name, "tg")
        b = [sent(f) for f in sorted(glob.glob(f"{out}/{rate}-{name}-*.err"))]
        b = [x for x in b if x]
        f = lambda x: "-" if x is None else f"{x:.1f}"
        q = lambda a, c: "-" if a is None or not c else f"{a / c:.2f}"
        print(f"| {rate} | {name} | {f(p)} | {f(t)} | {q(p, onep)} | {q(t, onet)} | {statistics.median(b) if b else '-'} |")
PY
