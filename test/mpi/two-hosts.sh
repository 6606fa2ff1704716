#!/usr/bin/env bash
# test/mpi/two-hosts.sh WORKDIR MPIRUN -- ARGS...: runs `MPIRUN -np 2 ARGS` with one rank on each of two
# "hosts": network namespaces with their own addresses (10.77.0.2 and .3 on a bridge whose root side,
# 10.77.0.1, is mpirun's), Open MPI's remote launcher pointed at `ip netns exec HOST` instead of ssh
# (plm_rsh_agent) and a hostfile naming the two addresses, so the job starts the way docs/multi-process.md
# tells users to start one across hosts and every byte between the ranks crosses a real TCP/IP stack (btl
# tcp and the out-of-band channel on the bridge's subnet). Its own lines (the hosts, the bytes each sent) go
# to stderr, so stdout is the job's alone. Needs root and iproute2; exits 77 (skipped) where
# namespaces cannot be made. The namespaces, the bridge and the veth pairs are removed on exit, whatever
# happened. TPC_NETNS_RATE (e.g. 1gbit) limits both veths with an htb qdisc, for benchmarks.
# TPC_NETNS_SLOTS=N puts N ranks on each host (-np 2N; ranks 0..N-1 on .2, N..2N-1 on .3: a pipeline plan's
# stage 0 on one host and stage 1 on the other). TPC_NETNS_UNREACHABLE=ADDR adds a third hostfile line for
# ADDR with one more rank; the agent tries ADDR's ssh port as ssh would and fails like it when nothing
# answers (the hostfile of a user whose host is down or misspelt).
set -euo pipefail
work=$1 mpirun=$2
shift 2
[ "${1:-}" = "--" ] && shift
p=tpcnh$$ # interface names hold 15 characters: a per-run prefix keeps parallel runs apart
p=${p:0:10}
subnet=10.77.0
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null || ! ip netns add "${p}probe" 2> /dev/null; then
  echo "two-hosts: cannot make network namespaces here (needs root and iproute2); skipped"
  exit 77
fi
ip netns del "${p}probe"
# One job at a time on this machine: the subnet is fixed, and lit-mpi and lit-mpi-shared may run this together.
exec 9> "${TMPDIR:-/tmp}/tpc-two-hosts.lock"
flock 9
cleanup() {
  for i in 2 3; do ip netns del "${p}h$i" 2> /dev/null || true; done
  ip link del "${p}br" 2> /dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT # a timeout's SIGTERM still removes the namespaces (through the EXIT trap)
ip link add "${p}br" type bridge
ip addr add "$subnet.1/24" dev "${p}br"
ip link set "${p}br" up
for i in 2 3; do
  ns=${p}h$i
  ip netns add "$ns"
  ip link add "${p}v$i" type veth peer name "${p}p$i"
  ip link set "${p}p$i" netns "$ns"
  ip link set "${p}v$i" master "${p}br"
  ip link set "${p}v$i" up
  ip netns exec "$ns" ip addr add "$subnet.$i/24" dev "${p}p$i"
  ip netns exec "$ns" ip link set "${p}p$i" up
  ip netns exec "$ns" ip link set lo up
  if [ -n "${TPC_NETNS_RATE:-}" ]; then
    tc qdisc add dev "${p}v$i" root handle 1: htb default 1
    tc class add dev "${p}v$i" parent 1: classid 1:1 htb rate "$TPC_NETNS_RATE"
  fi
done
mkdir -p "$work"
# The launcher Open MPI calls as `AGENT [ssh options] HOST COMMAND...`: the command runs in HOST's namespace.
cat > "$work/netns-agent.sh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $subnet.2) ns=${p}h2 ;;
  $subnet.3) ns=${p}h3 ;;
  *) # Not one of the namespaces: reach it as ssh would (its port 22), and fail like ssh when nothing answers.
    if timeout 5 bash -c "exec 3<>/dev/tcp/\$host/22" 2> /dev/null; then
      echo "netns-agent: \$host answers, but it is not one of the test's hosts" >&2
    else
      echo "ssh: connect to host \$host port 22: no answer (netns-agent: unreachable or not resolved)" >&2
    fi
    exit 255 ;;
esac
# Each host its own session directory, as on real hosts: daemons sharing one raced creating it.
mkdir -p "$work/tmp-\$ns"
TMPDIR="$work/tmp-\$ns" exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$work/netns-agent.sh"
slots=${TPC_NETNS_SLOTS:-1}
printf '%s.2 slots=%s\n%s.3 slots=%s\n' "$subnet" "$slots" "$subnet" "$slots" > "$work/hostfile"
np=$((2 * slots))
if [ -n "${TPC_NETNS_UNREACHABLE:-}" ]; then
  printf '%s slots=1\n' "$TPC_NETNS_UNREACHABLE" >> "$work/hostfile"
  np=$((np + 1))
fi
echo "two-hosts: ranks on $subnet.2 and $subnet.3 (namespaces ${p}h2, ${p}h3)" >&2
status=0
# routed=direct: Open MPI 4's default routing tree crashed mpirun now and then when it launched through the
# agent (its own message suggests the parameter); with two hosts a tree buys nothing.
mkdir -p "$work/tmp-hnp"
TMPDIR="$work/tmp-hnp" $mpirun --hostfile "$work/hostfile" -np $np --mca plm_rsh_agent "$work/netns-agent.sh" --mca routed direct \
  --mca btl tcp,self \
  --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" "$@" || status=$?
# Bytes the ranks exchanged: the veths' counters (what crossed the namespaces' stacks).
for i in 2 3; do
  echo "two-hosts: $subnet.$i sent $(ip netns exec "${p}h$i" cat /sys/class/net/${p}p$i/statistics/tx_bytes) bytes" >&2
done
exit $status
