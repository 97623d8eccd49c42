#!/usr/bin/env bash
# Two builds of optio side by side on whole objects: each round starts a fresh
# `optio up --zones 3 --hosts 1` cluster (3 servers, r = 3) with build A, runs `optio bench`
# (write then read), stops it, then the same with build B; rounds alternate A and B so that
# drifts of the machine hit both. Prints, per run, write and read MB/s and the CPU per
# operation of the servers and of the client (what `optio bench --json` reports).
# Usage: scripts/bench-object-ab.sh BUILD_A BUILD_B [ROUNDS (3)]
#   env: OBJECTS (400), SIZE (4MiB), CONCURRENCY (16), READ_PASSES (1: reads of each object),
#        METADATA=1 (`optio bench --metadata`: also stat, then delete, each object; their
#        ops/s and servers' CPU and syncs per op are printed after the read columns),
#        TLS=1 (`optio up --tls`: every request over TLS),
#        TMPDIR (where the clusters go: a file system of your choice)
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
a=$1 b=$2 rounds=${3:-3}
objects=${OBJECTS:-400} size=${SIZE:-4MiB} concurrency=${CONCURRENCY:-16} passes=${READ_PASSES:-1}
metadata=${METADATA:-0}
up_flags=()
[ "${TLS:-0}" = 1 ] && up_flags=(--tls)
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "$bin: not an executable" >&2; exit 1; }; done
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
work=$(mktemp -d)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

run() { # BUILD LABEL
  local dir="$work/run"
  rm -rf "$dir"
  "$1" up --dir "$dir" --zones 3 --hosts 1 --capacity 64GiB "${up_flags[@]}" > "$work/up.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
  grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
  "$1" bench --cluster "$dir" --objects "$objects" --size "$size" --concurrency "$concurrency" \
    $([ "$passes" = 1 ] || echo --read-passes "$passes") $([ "$metadata" = 1 ] && echo --metadata) \
    --json > "$work/bench.json"
  kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""
  jq -r --arg l "$2" '[$l,
    (.write.mb_per_s * 10 | floor / 10), (.cost.write.servers_cpu_us_per_op | floor),
    (.cost.write.client_cpu_us_per_op | floor),
    (.read.mb_per_s * 10 | floor / 10), (.cost.read.servers_cpu_us_per_op | floor),
    (.cost.read.client_cpu_us_per_op | floor)] +
    (if .delete then [(.stat.operations / .stat.seconds | floor),
      (.delete.operations / .delete.seconds | floor), (.cost.delete.servers_cpu_us_per_op | floor),
      (.cost.delete.syncs_per_op * 100 | floor / 100)] else [] end) | @tsv' "$work/bench.json"
}

echo "A = $a"
echo "B = $b"
echo "$objects objects of $size (read $passes time(s)), $concurrency in flight, 3 servers (r = 3) ${up_flags[*]}, a fresh cluster per run"
printf 'build\twrite MB/s\tservers µs/op\tclient µs/op\tread MB/s\tservers µs/op\tclient µs/op'
[ "$metadata" = 1 ] && printf '\tstat/s\tdelete/s\tservers µs/delete\tsyncs/delete'
echo
for _ in $(seq "$rounds"); do
  run "$a" A
  run "$b" B
done
