#!/usr/bin/env bash
# hosts.sh — run a command beside N "hosts" made of Linux network namespaces,
# then remove them, whatever way the command ends.
#
#   tests/netns/hosts.sh N COMMAND...
#
# Makes namespaces ${prefix}h0 .. h(N-1), each with one veth interface eth0
# holding 10.213.0.(i+1)/24, all joined by a bridge that lives in a further
# namespace ${prefix}br (prefix = dynnet<this PID>-). The subnet exists only
# inside these namespaces: nothing is added to the namespace the test runs
# in, so traffic flows between the test's namespaces only and runs side by
# side do not collide. Then runs COMMAND (in the caller's namespace) with
#   DYN_NETNS_PREFIX   namespace name prefix (host hI is ${prefix}hI)
#   DYN_NETNS_HOSTS    "h0 h1 ..."
#   DYN_NETNS_SUBNET   10.213.0.0/24
#   DYN_NETNS_AGENT    tests/netns/agent.sh (mpirun's --mca plm_rsh_agent)
# (the mpirun jobs CMD starts run under `timeout`: tests/test_netns.c)
# and exits with its status. An EXIT trap kills every process left in the
# namespaces and deletes them; namespaces of an earlier run that died
# without its trap (SIGKILL) are removed first. Where namespaces cannot be
# made (no root, no iproute2, a container without CAP_NET_ADMIN) it prints
# one line starting "SKIP" and exits 77 (ctest's SKIP_RETURN_CODE).
#
# The namespaces keep Linux's default TCP settings, as real hosts would:
# after a link is cut, ending the job must not depend on TCP giving up on
# the unreachable host (about 15 minutes; see docs/multi-host.md).
set -uo pipefail
n=${1:-}
[[ $n =~ ^[1-9]$ ]] && [ $# -ge 2 ] || { echo "usage: hosts.sh N(1-9) COMMAND..." >&2; exit 2; }
shift
here=$(cd "$(dirname "$0")" && pwd)
prefix="dynnet$$-"
subnet_base=10.213.0

skip() { echo "SKIP network-namespace hosts: $*" >&2; exit 77; }

# Kill what runs in namespace $1 (TERM, then KILL), then delete it.
ns_remove() {
  local ns=$1 pids i
  pids=$(ip netns pids "$ns" 2>/dev/null)
  if [ -n "$pids" ]; then
    kill -TERM $pids 2>/dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      sleep 0.2
    done
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  fi
  ip netns del "$ns" 2>/dev/null
}

made=()
cleanup() {
  local ns
  for ns in "${made[@]}"; do ns_remove "$ns"; done
  made=()
}

# Namespaces of runs whose process is gone (killed before its trap ran).
remove_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dynnet[0-9]+-' || true); do
    pid=${ns#dynnet}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null || ns_remove "$ns"
  done
}

command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
command -v unshare >/dev/null || skip "the unshare command (util-linux) is not installed"
[ "$(id -u)" -eq 0 ] || skip "creating network namespaces needs root (uid is $(id -u))"
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 130' INT
remove_stale

out=$(ip netns add "${prefix}br" 2>&1) || skip "ip netns add failed: $out"
made+=("${prefix}br")
out=$( { ip -n "${prefix}br" link add br0 type bridge && ip -n "${prefix}br" link set br0 up; } 2>&1) ||
  skip "cannot create a bridge in a namespace: $out"
hosts=""
for ((i = 0; i < n; i++)); do
  ns="${prefix}h$i"
  out=$(ip netns add "$ns" 2>&1) || skip "ip netns add failed: $out"
  made+=("$ns")
  out=$( {
    ip -n "$ns" link add eth0 type veth peer name p$i netns "${prefix}br" &&
      ip -n "${prefix}br" link set p$i master br0 &&
      ip -n "${prefix}br" link set p$i up &&
      ip -n "$ns" addr add "$subnet_base.$((i + 1))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up
  } 2>&1) || skip "cannot set up host h$i (veth pair, address): $out"
  hosts+="${hosts:+ }h$i"
done

export DYN_NETNS_PREFIX=$prefix DYN_NETNS_HOSTS=$hosts DYN_NETNS_SUBNET="$subnet_base.0/24" DYN_NETNS_AGENT="$here/agent.sh"
"$@"
exit $?
