#!/bin/sh
# agent.sh — Open MPI's remote-start agent for the network-namespace "hosts"
# of tests/netns/hosts.sh, used as `--mca plm_rsh_agent agent.sh` in place
# of ssh (the mpirun that calls it runs under `timeout`: tests/test_netns.c).
# mpirun calls it as `agent.sh HOST COMMAND...`; it runs COMMAND in
# the namespace of HOST ($DYN_NETNS_PREFIX HOST) under a UTS namespace of
# its own whose host name is HOST, so every "host" has a distinct name (Open
# MPI names its shared-memory segments by host name: with one name for all
# namespaces, ranks of the second one crashed in the shared-memory BTL).
set -eu
[ $# -ge 2 ] || { echo "agent.sh: usage: agent.sh HOST COMMAND..." >&2; exit 2; }
: "${DYN_NETNS_PREFIX:?agent.sh: DYN_NETNS_PREFIX is not set (run under tests/netns/hosts.sh)}"
host=$1
shift
case $host in
  *[!A-Za-z0-9_-]*) echo "agent.sh: bad host name '$host'" >&2; exit 2 ;;
esac
exec ip netns exec "$DYN_NETNS_PREFIX$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
