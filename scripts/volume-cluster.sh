# Sourced by scripts/bench-volume-ab.sh and scripts/profile-volume.sh: an `optio up` cluster
# in a temporary directory with one volume `v1`, `optio nbd` serving it, and cleanup on exit.
# Expects $optio (the binary); UP_FLAGS (optional) are passed to `optio up`. Sets $work, $port,
# $uri, $up_pid, $nbd_pid, OPTIO_CLUSTER.

# start_volume_cluster SIZE: the cluster and the volume.
start_volume_cluster() {
  work=$(mktemp -d)
  up_pid="" nbd_pid=""
  trap stop_volume_cluster EXIT
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  uri="nbd://127.0.0.1:$port/v1"
  # shellcheck disable=SC2086
  "$optio" up --dir "$work/cluster" --capacity 64GiB ${UP_FLAGS:-} > "$work/up.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
  grep -q "Ctrl-C" "$work/up.log" || { echo "optio up did not come up:" >&2; cat "$work/up.log" >&2; exit 1; }
  export OPTIO_CLUSTER="$work/cluster"
  "$optio" volume create v1 "$1" > /dev/null
}

# start_nbd [VAR=VALUE [FLAGS]]: `optio nbd` serving v1 (with that environment variable, and
# those flags, split on spaces).
start_nbd() {
  # shellcheck disable=SC2086
  # Plain TCP on loopback, as qemu-nbd is measured (--insecure-plain-tcp: no TLS, no
  # authentication; scripts/bench-nbd-tls.sh measures what TLS costs).
  env ${1:+"$1"} "$optio" nbd --listen "127.0.0.1:$port" --insecure-plain-tcp ${2:-} v1 > "$work/nbd.out" 2> "$work/nbd.err" &
  nbd_pid=$!
  for _ in $(seq 300); do grep -q "^serving" "$work/nbd.out" && break; sleep 0.1; done
  grep -q "^serving" "$work/nbd.out" || { echo "optio nbd did not start:" >&2; cat "$work/nbd.err" >&2; exit 1; }
}

stop_nbd() { kill "$nbd_pid"; wait "$nbd_pid" 2>/dev/null || true; nbd_pid=""; }

stop_volume_cluster() {
  [ -n "$nbd_pid" ] && kill "$nbd_pid" 2>/dev/null && wait "$nbd_pid" 2>/dev/null
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  rm -rf "$work"
}
