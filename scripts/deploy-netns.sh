#!/usr/bin/env bash
# docs/deploy.md's three-host walkthrough, run on one machine: each host is a network namespace
# with its own address on a private bridge (10.77.0.0/24, inside a namespace of its own), etcd
# runs on the first host, the servers run from configuration files with the cluster keyring,
# `optio manager` watches them, and the client works from a fourth namespace with nothing but
# a cluster directory (the map's etcd address and a key file). It checks what the guide
# promises: writes and reads from the client, HEALTH_OK; a host killed with SIGKILL is marked
# down, writes go on (degraded), and after its return every object reads back as written and
# the cluster is healthy again.
# Needs root, iproute2 and Debian's etcd-server. Under CI=true a missing piece is a failure.
# Usage: scripts/deploy-netns.sh [OPTIO_BINARY]   (default: target/debug/optio, built if absent)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${1:-${CARGO_TARGET_DIR:-$root/target}/debug/optio}
if [ ! -x "$optio" ]; then
  cargo build --quiet --locked --manifest-path "$root/Cargo.toml" -p optio
fi

skip() {
  if [ "${CI:-}" = "true" ]; then echo "deploy-netns: $1 (required when CI=true)" >&2; exit 1; fi
  echo "deploy-netns: skipped: $1" >&2
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null || skip "needs iproute2"
command -v etcd >/dev/null || skip "needs etcd (Debian's etcd-server)"

tag=$$
p="od$((tag % 100000))"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  # (And anything else started with this run's files, should a pid have been missed.)
  pkill -9 -f -- "$work/" 2>/dev/null || true
  for ns in h1 h2 h3 cl lan; do ip netns delete "$p-$ns" 2>/dev/null || true; done
  if [ "${KEEP:-}" = "1" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
  echo "deploy-netns: FAILED: $*" >&2
  for log in "$work"/*/*.log; do [ -f "$log" ] && { echo "== $log" >&2; tail -n 15 "$log" >&2; }; done
  exit 1
}

# The network: a bridge in namespace $p-lan; hosts h1-h3 at 10.77.0.11-13, the client at .100.
ip netns add "$p-lan" || skip "cannot create a network namespace"
ip -n "$p-lan" link add br0 type bridge
ip -n "$p-lan" link set br0 up
declare -A addr=([h1]=10.77.0.11 [h2]=10.77.0.12 [h3]=10.77.0.13 [cl]=10.77.0.100)
for h in h1 h2 h3 cl; do
  ip netns add "$p-$h"
  ip link add "$p$h" netns "$p-lan" type veth peer name eth0 netns "$p-$h"
  ip -n "$p-lan" link set "$p$h" master br0 up
  ip -n "$p-$h" addr add "${addr[$h]}/24" dev eth0
  ip -n "$p-$h" link set eth0 up
  ip -n "$p-$h" link set lo up
done
on() { local h=$1; shift; ip netns exec "$p-$h" "$@"; }
etcd_url="etcd://10.77.0.11:2379/optio"

# 1. etcd on host 1.
mkdir -p "$work/h1" "$work/h2" "$work/h3" "$work/admin" "$work/client"
# (Processes run in the background are started with `ip netns exec` itself, not through
# `on`, so that $! is the process and not a subshell.)
ip netns exec "$p-h1" etcd --name e1 --data-dir "$work/h1/etcd" \
  --listen-client-urls http://10.77.0.11:2379 --advertise-client-urls http://10.77.0.11:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster e1=http://127.0.0.1:2380 >"$work/h1/etcd.log" 2>&1 &
pids+=($!)
disown
for _ in $(seq 100); do on cl bash -c 'exec 3<>/dev/tcp/10.77.0.11/2379' 2>/dev/null && break; sleep 0.1; done

# 2. The map, in etcd (from the admin's machine: here the client namespace).
on cl "$optio" map init --map "$etcd_url" --zones 3 --hosts 1 --capacity 2GiB \
  --addr z1-h1=10.77.0.11:7000 --addr z2-h1=10.77.0.12:7000 --addr z3-h1=10.77.0.13:7000 \
  >"$work/admin/init.out" || fail "map init"

# 3. The keyring: client.admin, one key per server, a client that may write.
keyring="$work/admin/keyring"
"$optio" auth init --keyring "$keyring" >/dev/null
for i in 1 2 3; do
  "$optio" auth add "server.z$i-h1" --caps server --keyring "$keyring" -o "$work/admin/z$i.key" >/dev/null
done
"$optio" auth add client.app --caps write --keyring "$keyring" -o "$work/client/app.keyring" >/dev/null

# 4. Each host: its keyring copy (0600) and its configuration file; then its server.
start_server() {
  local i=$1
  ip netns exec "$p-h$i" "$optio" server --config "$work/h$i/server.toml" >>"$work/h$i/server.log" 2>&1 &
  pids+=($!)
  eval "server_$i=$!"
  disown
}
for i in 1 2 3; do
  install -m 0600 "$keyring" "$work/h$i/keyring"
  cat >"$work/h$i/server.toml" <<EOF
listen = "10.77.0.1$i:7000"
device = ["$((i - 1)):2GiB:$work/h$i/dev$((i - 1))"]
map = "$etcd_url"
keyring = "$work/h$i/keyring"
name = "z$i-h1"
EOF
  start_server "$i"
done

# 5. The manager (any host; here host 2), with a short grace for the test.
ip netns exec "$p-h2" "$optio" manager --map "$etcd_url" --keyring "$keyring" --down-grace 3s --out-grace 10m \
  >"$work/h2/manager.log" 2>&1 &
pids+=($!)
disown

# 6. The client: a cluster directory with the map's address and its key.
echo "$etcd_url" >"$work/client/map-source"
client() { on cl env OPTIO_CLUSTER="$work/client" OPTIO_ID=client.app OPTIO_KEYRING="$work/client/app.keyring" "$optio" "$@"; }
admin() { on cl env OPTIO_CLUSTER="$work/client" OPTIO_KEYRING="$keyring" "$optio" "$@"; }

wait_health() {
  local want=$1 bound=$2 code
  for _ in $(seq "$bound"); do
    code=0
    admin status >"$work/admin/status.out" 2>&1 || code=$?
    [ "$code" -eq "$want" ] && return 0
    sleep 1
  done
  cat "$work/admin/status.out" >&2
  fail "status did not exit $want within ${bound}s (last: $code)"
}
wait_health 0 60
grep -q "z2-h1" "$work/admin/status.out" || fail "status names no host: $(cat "$work/admin/status.out")"

# Servers listen on their hosts' addresses only.
on cl bash -c 'exec 3<>/dev/tcp/10.77.0.12/7000' 2>/dev/null || fail "host 2's server is not reachable from the client"

for i in $(seq 1 20); do
  head -c $((1000 + i * 997)) /dev/urandom >"$work/client/obj$i"
  client put "obj$i" "$work/client/obj$i" 2>/dev/null || fail "put obj$i"
done
for i in $(seq 1 20); do
  client get "obj$i" -o "$work/client/back$i" 2>/dev/null || fail "get obj$i"
  cmp -s "$work/client/obj$i" "$work/client/back$i" || fail "obj$i reads back other bytes"
done
# A read-only or unknown identity cannot write.
if on cl env OPTIO_CLUSTER="$work/client" OPTIO_ID=client.nobody OPTIO_KEYRING="$work/client/app.keyring" \
  "$optio" put intruder "$work/client/obj1" 2>/dev/null; then
  fail "an unknown identity wrote"
fi

# 7. Host 3 dies (SIGKILL): the manager marks it down, writes go on with 2 of 3 copies.
kill -9 "$server_3"
wait_health 2 60
grep -q "HEALTH_WARN" "$work/admin/status.out" || fail "no HEALTH_WARN: $(cat "$work/admin/status.out")"
for i in $(seq 21 30); do
  head -c $((1000 + i * 997)) /dev/urandom >"$work/client/obj$i"
  client put "obj$i" "$work/client/obj$i" 2>"$work/client/put.err" || fail "degraded put obj$i: $(cat "$work/client/put.err")"
done

# 8. It comes back: it catches up, the manager marks it up, the cluster is healthy again.
start_server 3
wait_health 0 120
for i in $(seq 1 30); do
  client get "obj$i" -o "$work/client/back$i" 2>/dev/null || fail "get obj$i after the return"
  cmp -s "$work/client/obj$i" "$work/client/back$i" || fail "obj$i reads back other bytes after the return"
done
# Every replica agrees (the returned host caught up on what it missed).
for i in 21 25 30; do
  client stat "obj$i" --verify >"$work/client/stat.out" 2>&1 || fail "stat --verify obj$i: $(cat "$work/client/stat.out")"
done
echo "deploy-netns: ok (3 hosts, etcd, manager; 30 objects; a host killed and back)"
